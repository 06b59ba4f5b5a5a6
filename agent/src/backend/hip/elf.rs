//! What the agent checks in an AMDGPU code object before handing it to the driver: the header's
//! machine and target (`e_flags & EF_AMDGPU_MACH`) and the kernels in its symbol tables, read
//! through the `object` crate. Pure, so it is tested on bytes built here and on the embedded code
//! objects.

use object::read::elf::ElfFile64;
use object::{LittleEndian, Object, ObjectSymbol, SymbolKind};

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = object::elf::EM_AMDGPU;
/// The target field of `e_flags`.
pub const EF_AMDGPU_MACH: u32 = 0xff;

/// `EF_AMDGPU_MACH_AMDGCN_*` values (llvm/BinaryFormat/ELF.h, LLVM 19) of the GCN/RDNA/CDNA
/// targets, so a header can be named.
const MACHS: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
];

/// The target name of an `EF_AMDGPU_MACH` value, if known.
pub fn mach_name(mach: u32) -> Option<&'static str> {
    MACHS.iter().find(|(m, _)| *m == mach).map(|(_, n)| *n)
}

/// The `EF_AMDGPU_MACH` value of a target name, if known.
pub fn mach_of(target: &str) -> Option<u32> {
    MACHS.iter().find(|(_, n)| *n == target).map(|(m, _)| *m)
}

/// What a code object says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    pub machine: u16,
    pub flags: u32,
    /// `EI_ABIVERSION`: 2 = code object v4, 3 = v5.
    pub abi_version: u8,
    /// Kernels: function symbols with a `<name>.kd` kernel descriptor.
    pub kernels: Vec<String>,
}

impl CodeObject {
    /// The target named by the header, e.g. `gfx1030`.
    pub fn target(&self) -> Option<&'static str> {
        mach_name(self.flags & EF_AMDGPU_MACH)
    }
}

/// Why bytes are not a readable code object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an AMDGPU code object: {0}")]
pub struct NotCodeObject(pub String);

/// Parses the header and the symbol tables of a little-endian ELF64 AMDGPU file (through the
/// `object` crate).
///
/// # Errors
/// [`NotCodeObject`] naming the first thing that does not fit.
pub fn parse(b: &[u8]) -> Result<CodeObject, NotCodeObject> {
    let bad = |why: String| NotCodeObject(why);
    if b.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(bad("no ELF magic".into()));
    }
    let file = ElfFile64::<LittleEndian>::parse(b)
        .map_err(|e| bad(format!("not a little-endian 64-bit ELF: {e}")))?;
    let header = file.elf_header();
    let machine = header.e_machine.get(LittleEndian);
    if machine != EM_AMDGPU {
        return Err(bad(format!(
            "e_machine {machine} is not EM_AMDGPU ({EM_AMDGPU})"
        )));
    }
    let mut funcs = Vec::new();
    let mut descriptors = Vec::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let name = sym
            .name()
            .map_err(|e| bad(format!("symbol name out of the file: {e}")))?;
        if name.is_empty() {
            continue;
        }
        if sym.kind() == SymbolKind::Text {
            funcs.push(name.to_string());
        } else if let Some(k) = name.strip_suffix(".kd") {
            descriptors.push(k.to_string());
        }
    }
    let mut kernels: Vec<String> = funcs
        .into_iter()
        .filter(|f| descriptors.contains(f))
        .collect();
    kernels.sort();
    kernels.dedup();
    Ok(CodeObject {
        machine,
        flags: header.e_flags.get(LittleEndian),
        abi_version: header.e_ident.abi_version,
        kernels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHT_SYMTAB: u32 = 2;
    const STT_FUNC: u8 = 2;

    /// A minimal AMDGPU ELF: header, a .strtab and a .symtab with `k` (FUNC) and `k.kd` (OBJECT)
    /// and a helper function `h` without a descriptor.
    fn tiny(mach: u32) -> Vec<u8> {
        // Padded to 8 bytes: the symbol table and the section headers after it stay aligned, as
        // in any linked ELF64 (and as a zero-copy reader requires).
        let strtab = b"\0k\0k.kd\0h\0\0\0\0\0\0\0".to_vec();
        let mut symtab = vec![0u8; 24]; // the null symbol
        for (name, info) in [(1u32, STT_FUNC), (3, 1), (8, STT_FUNC)] {
            let mut s = vec![0u8; 24];
            s[..4].copy_from_slice(&name.to_le_bytes());
            s[4] = 0x10 | info;
            symtab.extend(s);
        }
        let str_off = 64usize;
        let sym_off = str_off + strtab.len();
        let sh_off = sym_off + symtab.len();
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[7] = 64; // ELFOSABI_AMDGPU_HSA
        b[8] = 2;
        b[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        b[40..48].copy_from_slice(&(sh_off as u64).to_le_bytes());
        b[48..52].copy_from_slice(&(mach | 0x500).to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&3u16.to_le_bytes());
        b[62..64].copy_from_slice(&1u16.to_le_bytes()); // section names: the one string table
        b.extend(&strtab);
        b.extend(&symtab);
        let header = |kind: u32, off: usize, size: usize, link: u32| {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h
        };
        b.extend(header(0, 0, 0, 0));
        b.extend(header(3, str_off, strtab.len(), 0));
        b.extend(header(SHT_SYMTAB, sym_off, symtab.len(), 1));
        b
    }

    #[test]
    fn reads_target_and_kernels() {
        let co = parse(&tiny(0x36)).unwrap();
        assert_eq!(co.machine, EM_AMDGPU);
        assert_eq!(co.target(), Some("gfx1030"));
        assert_eq!(co.abi_version, 2);
        assert_eq!(co.kernels, ["k"], "h has no kernel descriptor");
    }

    #[test]
    fn refuses_what_is_not_a_code_object() {
        assert!(parse(b"not an elf").is_err());
        let mut b = tiny(0x2a);
        b[18] = 62; // EM_X86_64
        assert!(parse(&b).unwrap_err().0.contains("EM_AMDGPU"));
        let mut b = tiny(0x2a);
        b.truncate(100);
        assert!(parse(&b).is_err(), "section headers past the end");
        let mut b = tiny(0x2a);
        b[4] = 1;
        assert!(parse(&b).is_err(), "32-bit");
    }

    #[test]
    fn mach_table_round_trips_and_matches_llvm() {
        for (mach, name) in [
            (0x2a, "gfx803"),
            (0x2c, "gfx900"),
            (0x2f, "gfx906"),
            (0x30, "gfx908"),
            (0x3f, "gfx90a"),
            (0x33, "gfx1010"),
            (0x36, "gfx1030"),
            (0x41, "gfx1100"),
            (0x4c, "gfx942"),
        ] {
            assert_eq!(mach_name(mach), Some(name));
            assert_eq!(mach_of(name), Some(mach));
        }
        assert_eq!(mach_name(0x01), None);
        assert_eq!(mach_of("gfx9999"), None);
    }
}
