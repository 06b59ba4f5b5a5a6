#!/usr/bin/env python3
"""Tests of ci/check_structure.py on fixture workspaces in temp dirs: `python3 ci/test_check_structure.py`."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_structure.py")


def check(files):
    """Exit code and stdout of the check on a one-crate workspace `demo` holding `files` (path -> text)."""
    with tempfile.TemporaryDirectory() as root:
        files = {"Cargo.toml": '[workspace]\nmembers = ["demo"]\n', "demo/Cargo.toml": '[package]\nname = "demo"\n', **files}
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))
        done = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
        return done.returncode, done.stdout


class Cycles(unittest.TestCase):
    def test_two_files_through_super(self):
        rc, out = check(
            {
                "demo/src/lib.rs": "mod a;\nmod b;\n",
                "demo/src/a.rs": "use super::b::B;\npub struct A(pub Option<B>);\n",
                "demo/src/b.rs": "use super::a::{self};\npub struct B;\npub fn f(_: a::A) {}\n",
            }
        )
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle: demo/src/a.rs -> demo/src/b.rs -> demo/src/a.rs\n", out)
        self.assertIn("  demo/src/a.rs -> demo/src/b.rs: B\n", out)
        self.assertIn("  demo/src/b.rs -> demo/src/a.rs: a\n", out)
        self.assertIn("structure: 3 files, 1 cycles, 0 files over 600 lines", out)

    def test_three_file_loop_through_grouped_use_and_a_path_in_code(self):
        rc, out = check(
            {
                "demo/src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
                "demo/src/a.rs": "use crate::{b::{B, g}};\npub struct A;\npub fn f(_: B) { g() }\n",
                "demo/src/b.rs": "pub use crate::c::C;\npub struct B;\npub fn g() {}\n",
                "demo/src/c.rs": "pub struct C;\npub fn h() -> crate::a::A { crate::a::A }\n",
            }
        )
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle: demo/src/a.rs -> demo/src/b.rs -> demo/src/c.rs -> demo/src/a.rs\n", out)
        self.assertIn("  demo/src/a.rs -> demo/src/b.rs: B, g\n", out)
        self.assertIn("  demo/src/c.rs -> demo/src/a.rs: A\n", out)

    def test_a_re_export_is_followed_to_the_file_that_defines_the_item(self):
        files = {
            "demo/src/lib.rs": "mod m;\nmod x;\n",
            # m/mod.rs re-exports Thing; its child uses a helper mod.rs defines; x.rs uses Thing.
            "demo/src/m/mod.rs": "mod inner;\npub use inner::Thing;\npub fn helper() {}\n",
            "demo/src/m/inner.rs": "use super::helper;\npub struct Thing;\npub fn t() { helper() }\n",
            "demo/src/x.rs": "use crate::m::Thing;\npub struct X(pub Thing);\n",
        }
        rc, out = check(files)
        self.assertEqual(rc, 0, out)
        self.assertIn("structure: 4 files, 0 cycles", out)
        # Thing's file, not m/mod.rs, is the other end of the loop.
        files["demo/src/m/inner.rs"] += "pub fn back(_: crate::x::X) {}\n"
        rc, out = check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle: demo/src/m/inner.rs -> demo/src/x.rs -> demo/src/m/inner.rs\n", out)
        self.assertIn("  demo/src/x.rs -> demo/src/m/inner.rs: Thing\n", out)
        self.assertNotIn("demo/src/m/mod.rs", out)

    def test_test_code_and_test_only_files_carry_no_edge(self):
        rc, out = check(
            {
                "demo/src/lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod only_tests;\n",
                "demo/src/a.rs": "use crate::b::B;\npub struct A(pub B);\n",
                "demo/src/b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n    fn f(_: A) {}\n}\n",
                "demo/src/only_tests.rs": "use crate::a::A;\npub fn g(_: A) {}\n",
            }
        )
        self.assertEqual(rc, 0, out)
        self.assertIn("structure: 3 files, 0 cycles", out)


def lines(n, prefix=""):
    return "".join(f"{prefix}pub const C{i}: u32 = {i};\n" for i in range(n))


class Length(unittest.TestCase):
    def test_a_601_line_file_fails(self):
        rc, out = check({"demo/src/lib.rs": "mod long;\n", "demo/src/long.rs": lines(601)})
        self.assertEqual(rc, 1, out)
        self.assertIn("too long: demo/src/long.rs 601 lines (limit 600)\n", out)

    def test_a_600_line_file_passes(self):
        rc, out = check({"demo/src/lib.rs": "mod long;\n", "demo/src/long.rs": lines(600)})
        self.assertEqual(rc, 0, out)
        self.assertIn("longest non-test file demo/src/long.rs (600 lines)", out)

    def test_the_lines_of_a_cfg_test_module_do_not_count(self):
        # 550 lines of code, then a 100-line test module whose strings, chars, raw strings and
        # comments hold braces that must not end it early.
        tests = "#[cfg(test)]\nmod tests {\n" + lines(91, "    ")
        tests += '    const S: &str = "}}";\n    const R: &str = r#"} "}" "#;\n    const Q: char = \'}\';\n'
        tests += "    // }\n    /* } /* } */ */\n    fn f<'a>(x: &'a str) -> &'a str { x }\n}\n"
        text = lines(550) + tests
        self.assertEqual(len(text.splitlines()), 650)
        rc, out = check({"demo/src/lib.rs": "mod long;\n", "demo/src/long.rs": text})
        self.assertEqual(rc, 0, out)
        self.assertIn("longest non-test file demo/src/long.rs (550 lines)", out)
        # The same file with the test module's attribute gone is 650 lines of code.
        rc, out = check({"demo/src/lib.rs": "mod long;\n", "demo/src/long.rs": text.replace("#[cfg(test)]\n", "\n")})
        self.assertEqual(rc, 1, out)
        self.assertIn("too long: demo/src/long.rs 650 lines (limit 600)\n", out)


class KernelNames(unittest.TestCase):
    """A catalog kernel named (`KernelId::X`, `FamilyKernel::Y`) in at most 8 non-test files."""

    def fleet(self, users, in_tests=0):
        catalog = "pub enum KernelId {\n    Gemm,\n    #[doc = \"x\"]\n    Rows(RowKernel),\n}\n"
        catalog += "pub enum RowKernel {\n    Softmax,\n    LayerNorm { eps: u8 },\n}\n"
        files = {"demo/src/catalog/mod.rs": catalog}
        mods = ["pub mod catalog;"]
        for i in range(users + in_tests):
            body = "pub fn f() -> crate::catalog::KernelId { crate::catalog::KernelId::Gemm }\n"
            if i >= users:  # named only in a test module
                body = "#[cfg(test)]\nmod tests {\n    " + body + "}\n"
            files[f"demo/src/u{i}.rs"] = body
            mods.append(f"mod u{i};")
        files["demo/src/lib.rs"] = "\n".join(mods) + "\n"
        return check(files)

    def test_eight_files_pass_and_test_modules_do_not_count(self):
        rc, out = self.fleet(8, in_tests=3)
        self.assertEqual(rc, 0, out)

    def test_nine_files_fail_naming_the_kernel_and_the_files(self):
        rc, out = self.fleet(9)
        self.assertEqual(rc, 1, out)
        self.assertIn("named too widely: KernelId::Gemm in 9 non-test files (limit 8): demo/src/u0.rs, ", out)
        self.assertIn("1 kernels named in more than 8 files", out)


if __name__ == "__main__":
    unittest.main()
