#!/usr/bin/env python3
"""Structure check for the workspace's Rust crates, run by `.ci/run`.

Fails (exit 1) on
- an import cycle between Rust files: A -> B when a `use` in A (grouped and `pub use` included) or
  a `crate::`/`super::`/`self::` path written in A's code resolves to an item that file B defines
  (re-exports are followed to the defining file; a path naming a module resolves to the module's
  file). Each strongly connected component of more than one file is printed as a loop, with the
  names that carry each edge. A `mod child;` declaration is not an edge;
- a Rust file with more than LIMIT lines outside its `#[cfg(test)]` items;
- a catalog kernel named in more than NAMED_LIMIT non-test files: `KernelId::Variant` or
  `<Family>Kernel::Variant`, where `KernelId` and the `...Kernel` enums are those its defining folder
  declares (the catalog). What a backend or a page needs of a kernel is asked of the catalog, so a kernel
  is named only where it is defined, computed or planned.

`#[cfg(test)]` items, and files compiled only for tests (`#[cfg(test)] mod x;` targets, the crates'
`tests/`), are left out. The files are those of each workspace member's module tree, from
`src/lib.rs`, `src/main.rs`, `src/bin/` and `[[bin]]`/`[lib]` paths through `mod x;`
(`x.rs`, `x/mod.rs` or `#[path = ...]`). The lexer knows comments, strings, raw strings and chars,
so braces inside them do not end an item. Stdlib only; `python3 ci/check_structure.py [--root DIR]`.
"""

import argparse
import os
import re
import sys
import tomllib
from collections import defaultdict, deque

LIMIT = 600
NAMED_LIMIT = 8

TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*)
    |(?P<raw>(?:br|cr|r)(?P<hashes>\#*)")
    |(?P<str>[bc]?"(?:[^"\\]|\\.)*")
    |(?P<chr>b?'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.))')
    |(?P<life>'[A-Za-z_]\w*)
    |(?P<id>(?:r\#)?[A-Za-z_]\w*)
    |(?P<num>[0-9]\w*)
    |(?P<p>::|.)""",
    re.X | re.S,
)
# Keywords after which an item ends at its first `;` or its first `{ ... }` block.
BLOCK_ITEMS = {"fn", "mod", "struct", "enum", "union", "trait", "impl", "extern", "macro_rules"}
NAMED_ITEMS = {"fn", "struct", "enum", "union", "trait", "type", "const", "static"}
# Keywords of items that end at their `;` (a comma inside them ends nothing).
STATEMENTS = {"use", "const", "static", "type", "let"}
QUALIFIERS = {"default", "async", "unsafe", "safe", "auto"}
OPEN = {"(": ")", "[": "]", "{": "}"}


def lex(text, path):
    """Tokens of a Rust source as (text, line); comments and whitespace dropped, literals kept whole."""
    toks, pos, line, n = [], 0, 1, len(text)
    while pos < n:
        m = TOKEN.match(text, pos)
        kind, end = m.lastgroup, m.end()
        if kind == "hashes":
            kind = "raw"
        if kind == "bc":  # block comments nest
            depth, end = 1, pos + 2
            while depth and end < n:
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        elif kind == "raw":
            close = text.find('"' + m.group("hashes"), end)
            if close < 0:
                sys.exit(f"{path}:{line}: unterminated raw string")
            end = close + 1 + len(m.group("hashes"))
        if kind not in ("ws", "lc", "bc"):
            toks.append((text[pos:end] if kind in ("id", "p") else "<lit>", line))
        line += text.count("\n", pos, end)
        pos = end
    return toks


class Source:
    """One Rust file: its tokens, bracket pairs, and the token ranges of its `#[cfg(test)]` items."""

    def __init__(self, path, rel):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.path, self.rel = path, rel
        self.lines = len(text.splitlines())
        toks = lex(text, rel)
        self.t = [t for t, _ in toks] + ["<eof>"]
        self.line = [ln for _, ln in toks] + [self.lines]
        self.match, stack = {}, []
        for i, t in enumerate(self.t):
            if t in OPEN:
                stack.append(i)
            elif t in (")", "]", "}") and stack and OPEN[self.t[stack[-1]]] == t:
                j = stack.pop()
                self.match[j], self.match[i] = i, j
        self.tests, self.file_is_test = {}, False
        self.find_tests()

    def group_end(self, i):
        return self.match.get(i, i)

    def attr(self, i):
        """(end, inner, is cfg(test)) of the attribute starting at token i, or None."""
        if self.t[i] != "#":
            return None
        inner = self.t[i + 1] == "!"
        b = i + 2 if inner else i + 1
        if self.t[b] != "[" or b not in self.match:
            return None
        e = self.match[b]
        return e, inner, self.t[b + 1] == "cfg" and cfg_is_test(self.t[b + 3 : e - 1])

    def find_tests(self):
        """Every `#[cfg(test)]` item, at any depth: its tokens from its first attribute to its end."""
        i = 0
        while i < len(self.t) - 1:
            a = self.attr(i)
            if not a:
                i += 1
                continue
            start, test = i, False
            while a:
                if a[1] and a[2] and start == 0:
                    self.file_is_test = True
                test = test or (a[2] and not a[1])
                i = a[0] + 1
                a = self.attr(i)
            if test:
                end = self.item_end(i)
                self.tests[start] = end
                i = end + 1

    def item_end(self, i):
        """Index of the last token of the item, statement, field or arm starting at token i."""
        t = self.t
        k = self.skip_qualifiers(i)
        if t[k] in BLOCK_ITEMS:
            while t[k] not in (";", "{", "<eof>"):
                k = self.group_end(k) + 1 if t[k] in ("(", "[") else k + 1
            return self.group_end(k) if t[k] == "{" else k
        if t[k] == "{":
            return self.group_end(k)
        macro = t[k + 1] == "!" and t[k + 2] in OPEN
        stops = (";", ")", "]", "}", "<eof>") if t[k] in STATEMENTS else (";", ",", ")", "]", "}", "<eof>")
        while t[k] not in stops:
            if t[k] in OPEN:
                k = self.group_end(k)
                if macro and t[k] == "}":
                    return k
            k += 1
        return k if t[k] in (";", ",") else k - 1

    def skip_qualifiers(self, k):
        t = self.t
        while True:
            if t[k] == "pub":
                k = self.group_end(k + 1) + 1 if t[k + 1] == "(" else k + 1
            elif t[k] in QUALIFIERS or (t[k] == "const" and t[k + 1] in ("fn", "unsafe", "async", "extern")):
                k += 1
            elif t[k] == "extern" and t[k + 1] == "<lit>" and t[k + 2] == "fn":
                k += 2
            else:
                return k

    def non_test_lines(self):
        test = set()
        for a, b in self.tests.items():
            test.update(range(self.line[a], self.line[b] + 1))
        return self.lines - len(test)


def cfg_is_test(pred):
    """Whether a cfg predicate (tokens inside `cfg(...)`) holds only in test builds."""
    if pred == ["test"]:
        return True
    if pred[:2] == ["all", "("]:
        arg, depth = [], 0
        for tok in pred[2:-1] + [","]:
            depth += tok in OPEN
            depth -= tok in (")", "]", "}")
            if tok == "," and depth == 0:
                if cfg_is_test(arg):
                    return True
                arg = []
            else:
                arg.append(tok)
    return False


class Module:
    def __init__(self, name, parent, file, child_dir, inline):
        self.name, self.parent, self.file = name, parent, file
        self.child_dir, self.inline = child_dir, inline
        self.root = parent.root if parent else self
        self.children, self.items = {}, defaultdict(set)
        self.uses = []  # (segments, bound name, glob)


class Workspace:
    def __init__(self, root):
        self.root = root
        self.sources = {}
        self.refs = []  # (file, module, segments, in a use?, glob?)
        self.missing = []

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def source(self, path):
        if path not in self.sources:
            self.sources[path] = Source(path, self.rel(path))
        return self.sources[path]

    def load_crate(self, root_file):
        self.load_file(root_file, Module("crate", None, root_file, os.path.dirname(root_file), False))

    def load_file(self, path, module):
        src = self.source(path)
        if not src.file_is_test:
            self.scope(src, 0, len(src.t) - 1, module)

    def scope(self, src, i, end, module):
        """Items between tokens i and end (exclusive) of `module`: definitions, uses, child modules."""
        t = src.t
        while i < end:
            if t[i] == ";":
                i += 1
                continue
            path_attr = None
            while (a := src.attr(i)) is not None:
                if i in src.tests:
                    break
                if t[i + 2 : i + 4] == ["path", "="]:
                    path_attr = i + 4
                i = a[0] + 1
            if i >= end:
                return
            if i in src.tests:
                i = src.tests[i] + 1
                continue
            e = max(src.item_end(i), i)  # a stray closing bracket is passed over
            self.item(src, src.skip_qualifiers(i), e, module, path_attr)
            i = e + 1

    def item(self, src, k, e, module, path_attr):
        t = src.t
        kw = t[k]
        if kw == "use":
            for segs, name, glob in use_tree(t, k + 1):
                module.uses.append((segs, name, glob))
                self.refs.append((src.path, module, segs, True, glob))
        elif kw == "mod" and t[k + 2] == "{":
            child = Module(t[k + 1], module, src.path, os.path.join(module.child_dir, t[k + 1]), True)
            module.children[t[k + 1]] = child
            self.scope(src, k + 3, src.group_end(k + 2), child)
        elif kw == "mod":
            self.mod_file(src, t[k + 1], module, path_attr)
        elif kw == "extern" and t[k + 1] == "<lit>" and t[k + 2] == "{":
            self.scope(src, k + 3, src.group_end(k + 2), module)
        else:
            name = t[k + 2] if kw == "macro_rules" or t[k + 1] == "mut" else t[k + 1] if kw in NAMED_ITEMS else None
            if name and name != "_" and re.match(r"\w+$", name):
                module.items[name.removeprefix("r#")].add(src.path)
            self.code(src, k, e + 1, module)

    def mod_file(self, src, name, module, path_attr):
        if path_attr is not None:
            raw = self.literal(src, path_attr)
            base = module.child_dir if module.inline else os.path.dirname(src.path)
            candidates = [os.path.normpath(os.path.join(base, raw))]
        else:
            candidates = [os.path.join(module.child_dir, name + ".rs"), os.path.join(module.child_dir, name, "mod.rs")]
        path = next((c for c in candidates if os.path.isfile(c)), None)
        if path is None:
            self.missing.append(f"{src.rel}: no file for `mod {name};` (looked at {', '.join(map(self.rel, candidates))})")
            return
        own_dir = path[:-3] if path_attr is None and not path.endswith("mod.rs") else os.path.dirname(path)
        child = Module(name, module, path, own_dir, False)
        module.children[name] = child
        self.load_file(path, child)

    def literal(self, src, i):
        """The text of the string literal at token i (re-read from the file: the lexer keeps no text)."""
        with open(src.path, encoding="utf-8") as f:
            line = f.read().splitlines()[src.line[i] - 1]
        m = re.search(r'path\s*=\s*"([^"]*)"', line)
        return m.group(1) if m else ""

    def code(self, src, i, end, module):
        """`use` statements and `crate::`/`super::`/`self::` paths inside an item's tokens."""
        t = src.t
        while i < end:
            if i in src.tests:
                i = src.tests[i] + 1
                continue
            if t[i] == "use" and t[i + 1] != "<eof>":
                for segs, _, glob in use_tree(t, i + 1):
                    self.refs.append((src.path, module, segs, True, glob))
                while t[i] not in (";", "<eof>"):
                    i += 1
            elif t[i] in ("crate", "super", "self") and t[i + 1] == "::" and t[i - 1] not in ("$", "::", "in"):
                segs = [t[i]]
                while t[i + 1] == "::" and re.match(r"\w+$", t[i + 2]):
                    segs.append(t[i + 2])
                    i += 2
                self.refs.append((src.path, module, segs, False, False))
            i += 1

    def lookup(self, module, name, seen):
        """What `name` means inside `module`: [('mod', Module)] or [('item', file, name)]."""
        if (id(module), name) in seen:
            return []
        seen.add((id(module), name))
        found = [("mod", module.children[name])] if name in module.children else []
        found += [("item", f, name) for f in sorted(module.items.get(name, ()))]
        if not found:
            for segs, bound, glob in module.uses:
                if bound == name and not glob:
                    found += self.resolve(module, segs, seen)
        if not found:
            for segs, _, glob in module.uses:
                if glob:
                    for ent in self.resolve(module, segs, seen):
                        if ent[0] == "mod":
                            found += self.lookup(ent[1], name, seen)
        return found

    def resolve(self, module, segs, seen):
        """Where a path leads from `module`; an item ends the walk (`Enum::Variant`, `Type::method`)."""
        if segs[0] == "crate":
            cur, rest = [("mod", module.root)], segs[1:]
        elif segs[0] in ("super", "self"):
            m, n = module, 0
            while n < len(segs) and segs[n] in ("super", "self"):
                m = m.parent if segs[n] == "super" else m
                if m is None:
                    return []
                n += 1
            cur, rest = [("mod", m)], segs[n:]
        else:  # a name in scope here, or another crate
            cur, rest = self.lookup(module, segs[0], seen), segs[1:]
        for seg in rest:
            cur = [x for ent in cur for x in (self.lookup(ent[1], seg, seen) if ent[0] == "mod" else [ent])]
        return cur

    def edges(self):
        """{(from file, to file): names} over the files' non-test code."""
        out = defaultdict(set)
        for path, module, segs, is_use, glob in self.refs:
            if segs[0] not in ("crate", "super", "self") or (not is_use and len(segs) < 2):
                continue
            for ent in self.resolve(module, segs, set()):
                target, name = (ent[1].file, ent[1].name) if ent[0] == "mod" else (ent[1], ent[2])
                name = "*" if glob else name
                if target != path:
                    out[(path, target)].add(name)
        return out


def use_tree(t, i):
    """[(segments, bound name, glob)] of a use tree starting at token i."""
    out = []

    def tree(i, prefix):
        segs = list(prefix)
        while True:
            tok = t[i]
            if tok == "::":
                i += 1
            elif tok == "*":
                out.append((segs, "*", True))
                return i + 1
            elif tok == "{":
                i += 1
                while t[i] not in ("}", "<eof>"):
                    i = tree(i, segs)
                    i += t[i] == ","
                return i + 1
            elif re.match(r"\w+$", tok):
                segs, i = segs + [tok], i + 1
                if t[i] == "::":
                    continue
                bound = segs[-1]
                if t[i] == "as":
                    bound, i = t[i + 1], i + 2
                if segs[-1] == "self" and len(segs) > 1:
                    segs = segs[:-1]
                    bound = segs[-1] if bound == "self" else bound
                out.append((segs, bound, False))
                return i
            else:  # malformed: stop this branch
                return i + 1

    tree(i, [])
    return out


def kernel_enums(ws, files):
    """Variants of `KernelId` and of the `...Kernel` enums declared in its folder: {enum: variants}."""
    enums, folder = {}, None
    for p in sorted(files):
        t = ws.sources[p].t
        for i in range(len(t) - 2):
            if t[i] == "enum" and t[i + 2] == "{" and (t[i + 1] == "KernelId" or t[i + 1].endswith("Kernel")):
                enums[(p, t[i + 1])] = i + 2
                if t[i + 1] == "KernelId":
                    folder = os.path.dirname(p)
    out = {}
    for (p, name), b in enums.items():
        if folder is None or os.path.dirname(p) != folder:
            continue
        src, variants, prev = ws.sources[p], set(), "{"
        k = b + 1
        while k < src.group_end(b):
            tok = src.t[k]
            if tok in OPEN:
                k, prev = src.group_end(k) + 1, OPEN[tok]
                continue
            if re.fullmatch(r"[A-Z]\w*", tok) and prev in ("{", ",", "]"):
                variants.add(tok)
            prev, k = tok, k + 1
        out[name] = variants
    return out


def kernel_names(ws, files):
    """{"Enum::Variant": set of non-test files naming it}, for the kernel enums of `kernel_enums`."""
    enums = kernel_enums(ws, files)
    named = defaultdict(set)
    for p in files:
        src = ws.sources[p]
        test = set()
        for a, b in src.tests.items():
            test.update(range(a, b + 1))
        t = src.t
        for i in range(len(t) - 2):
            if t[i] in enums and t[i + 1] == "::" and t[i + 2] in enums[t[i]] and i not in test:
                named[f"{t[i]}::{t[i + 2]}"].add(p)
    return named


def crate_roots(root):
    """Root files of every workspace member's library and binaries."""
    with open(os.path.join(root, "Cargo.toml"), "rb") as f:
        members = tomllib.load(f).get("workspace", {}).get("members", [])
    roots = []
    for member in members:
        base = os.path.join(root, member)
        with open(os.path.join(base, "Cargo.toml"), "rb") as f:
            manifest = tomllib.load(f)
        found = [os.path.join(base, "src", n) for n in ("lib.rs", "main.rs")]
        found += [os.path.join(base, p) for p in [manifest.get("lib", {}).get("path")] if p]
        found += [os.path.join(base, b["path"]) for b in manifest.get("bin", []) if "path" in b]
        bins = os.path.join(base, "src", "bin")
        if os.path.isdir(bins):
            for n in sorted(os.listdir(bins)):
                found.append(os.path.join(bins, n, "main.rs") if os.path.isdir(os.path.join(bins, n)) else os.path.join(bins, n))
        for p in found:
            p = os.path.normpath(p)
            if p.endswith(".rs") and os.path.isfile(p) and p not in roots:
                roots.append(p)
    return roots


def components(nodes, edges):
    """Strongly connected components (Tarjan) of more than one node."""
    succ = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 4 * len(nodes)))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def loop_through(comp, edges):
    """A closed walk from the component's first file through all of its files."""
    inside = set(comp)
    succ = defaultdict(list)
    for a, b in sorted(edges):
        if a in inside and b in inside:
            succ[a].append(b)

    def path(a, goals):  # shortest path from a to the nearest of goals (BFS)
        prev, todo = {a: None}, deque([a])
        while todo:
            v = todo.popleft()
            for w in succ[v]:
                if w not in prev:
                    prev[w] = v
                    if w in goals:
                        steps = [w]
                        while prev[steps[-1]] != a:
                            steps.append(prev[steps[-1]])
                        return steps[::-1]
                    todo.append(w)
        return []

    walk, seen = [comp[0]], {comp[0]}
    while len(seen) < len(comp):
        steps = path(walk[-1], inside - seen)
        walk += steps
        seen.update(steps)
    return walk + path(walk[-1], {comp[0]})


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=here, help="workspace root (default: this repository)")
    root = os.path.abspath(parser.parse_args(argv).root)
    ws = Workspace(root)
    for r in crate_roots(root):
        ws.load_crate(r)
    for m in ws.missing:
        print(f"warning: {m}", file=sys.stderr)
    files = {p for p, s in ws.sources.items() if not s.file_is_test}
    edges = {k: v for k, v in ws.edges().items() if k[0] in files and k[1] in files}
    cycles = components(files, edges)
    for comp in cycles:
        walk = loop_through(comp, edges)
        print("cycle: " + " -> ".join(ws.rel(p) for p in walk))
        for (a, b), names in sorted(edges.items()):
            if a in comp and b in comp:
                print(f"  {ws.rel(a)} -> {ws.rel(b)}: {', '.join(sorted(names))}")
    lengths = sorted(((ws.sources[p].non_test_lines(), ws.rel(p)) for p in files), key=lambda x: (-x[0], x[1]))
    long = [(n, p) for n, p in lengths if n > LIMIT]
    for n, p in long:
        print(f"too long: {p} {n} lines (limit {LIMIT})")
    wide = sorted((k, v) for k, v in kernel_names(ws, files).items() if len(v) > NAMED_LIMIT)
    for k, v in wide:
        names = ", ".join(sorted(ws.rel(p) for p in v))
        print(f"named too widely: {k} in {len(v)} non-test files (limit {NAMED_LIMIT}): {names}")
    if not files:
        print(f"structure: no Rust files under {root}", file=sys.stderr)
        return 1
    if cycles or long or wide:
        print(
            f"structure: {len(files)} files, {len(cycles)} cycles, {len(long)} files over {LIMIT} lines, "
            f"{len(wide)} kernels named in more than {NAMED_LIMIT} files"
        )
        return 1
    n, p = lengths[0]
    print(f"structure: {len(files)} files, 0 cycles, longest non-test file {p} ({n} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
