//! Reading a CD-ROM image the way a Linux guest's cloud-init does: the volume label from
//! the primary volume descriptor, and the root directory's files by their Rock Ridge
//! names, else their Joliet names, else their plain ISO 9660 names as Linux shows them
//! (lower case, no `;1`). NoCloud wants the label `cidata` and the files `user-data` and
//! `meta-data`, so an image with only plain names (`USER_DAT.;1`) gives no user data.
//!
//! Written independently of the writer nodewright uses, so the simulator checks the seed
//! rather than trusting it. Only what a seed needs: one directory level, single extents.

use std::collections::BTreeMap;

const SECTOR: usize = 2048;

/// What the guest finds on the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The volume label (`cidata`), trailing spaces trimmed.
    pub label: String,
    /// The root directory's files by name.
    pub files: BTreeMap<String, Vec<u8>>,
}

fn sector(bytes: &[u8], n: usize) -> Result<&[u8], String> {
    bytes
        .get(n * SECTOR..(n + 1) * SECTOR)
        .ok_or_else(|| format!("image ends before sector {n}"))
}

fn u32_le(b: &[u8], at: usize) -> Result<usize, String> {
    let s = b.get(at..at + 4).ok_or("truncated directory record")?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// One directory record: its name as stored, its system-use area, its extent.
struct Record<'a> {
    name: &'a [u8],
    system_use: &'a [u8],
    lba: usize,
    len: usize,
    dir: bool,
}

fn records(bytes: &[u8], lba: usize, len: usize) -> Result<Vec<Record<'_>>, String> {
    let mut out = Vec::new();
    let end = lba * SECTOR + len;
    let mut at = lba * SECTOR;
    while at < end {
        let Some(&rlen) = bytes.get(at) else {
            return Err("directory runs past the image".into());
        };
        if rlen == 0 {
            // Records never cross a sector: the rest of this one is padding.
            at = (at / SECTOR + 1) * SECTOR;
            continue;
        }
        let r = bytes
            .get(at..at + rlen as usize)
            .ok_or("directory record runs past the image")?;
        let name_len = *r.get(32).ok_or("short directory record")? as usize;
        let name = r.get(33..33 + name_len).ok_or("short directory record")?;
        let su_start = 33 + name_len + usize::from(name_len.is_multiple_of(2));
        out.push(Record {
            name,
            system_use: r.get(su_start..).unwrap_or(&[]),
            lba: u32_le(r, 2)?,
            len: u32_le(r, 10)?,
            dir: r.get(25).is_some_and(|f| f & 2 != 0),
        });
        at += rlen as usize;
    }
    Ok(out)
}

/// The Rock Ridge alternate name (`NM` entries) of a record, if any.
fn rock_ridge_name(su: &[u8]) -> Option<String> {
    let mut name = Vec::new();
    let mut i = 0;
    while i + 4 <= su.len() {
        let len = su[i + 2] as usize;
        if len < 4 || i + len > su.len() {
            break;
        }
        if &su[i..i + 2] == b"NM" && len >= 5 {
            name.extend_from_slice(&su[i + 5..i + len]);
        }
        i += len;
    }
    (!name.is_empty()).then(|| String::from_utf8_lossy(&name).into_owned())
}

fn plain_name(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw).to_lowercase();
    let s = s.split(';').next().unwrap_or_default();
    s.strip_suffix('.').unwrap_or(s).to_string()
}

fn joliet_name(raw: &[u8]) -> String {
    let units: Vec<u16> = raw
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    let s = String::from_utf16_lossy(&units);
    s.split(';').next().unwrap_or_default().to_string()
}

/// Reads `bytes` as a guest would (see the module docs).
pub fn read(bytes: &[u8]) -> Result<Image, String> {
    let mut pvd_root = None;
    let mut joliet_root = None;
    let mut label = String::new();
    for n in 16..64 {
        let d = sector(bytes, n)?;
        if &d[1..6] != b"CD001" {
            return Err(format!("sector {n} is not an ISO 9660 volume descriptor"));
        }
        match d[0] {
            1 => {
                label = String::from_utf8_lossy(&d[40..72]).trim_end().to_string();
                pvd_root = Some((u32_le(d, 156 + 2)?, u32_le(d, 156 + 10)?));
            }
            2 if [b"%/@", b"%/C", b"%/E"].iter().any(|e| &d[88..91] == *e) => {
                joliet_root = Some((u32_le(d, 156 + 2)?, u32_le(d, 156 + 10)?));
            }
            255 => break,
            _ => {}
        }
    }
    let (lba, len) = pvd_root.ok_or("no primary volume descriptor")?;
    let root = records(bytes, lba, len)?;
    // Rock Ridge is announced by the root's `.` entry (an `SP` entry first).
    let rock_ridge = root
        .first()
        .is_some_and(|r| r.system_use.starts_with(b"SP"));
    let named: Vec<(String, &Record<'_>)> = if rock_ridge {
        root.iter()
            .filter_map(|r| rock_ridge_name(r.system_use).map(|n| (n, r)))
            .collect()
    } else {
        Vec::new()
    };
    let joliet;
    let named = match (named.is_empty(), joliet_root) {
        (false, _) => named,
        (true, Some((lba, len))) => {
            joliet = records(bytes, lba, len)?;
            joliet.iter().map(|r| (joliet_name(r.name), r)).collect()
        }
        (true, None) => root.iter().map(|r| (plain_name(r.name), r)).collect(),
    };
    let mut files = BTreeMap::new();
    for (name, r) in named {
        if r.dir || r.name == [0] || r.name == [1] || name.is_empty() || name == "." {
            continue;
        }
        let data = bytes
            .get(r.lba * SECTOR..r.lba * SECTOR + r.len)
            .ok_or_else(|| format!("file {name} runs past the image"))?;
        files.insert(name, data.to_vec());
    }
    Ok(Image { label, files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_seed_nodewright_writes() {
        let files = nodewright_core::cloud::proxmox::seed::SeedFiles {
            user_data: "#cloud-config\nruncmd: [k3s agent]\n".into(),
            meta_data: "instance-id: i\n".into(),
            network_config: None,
        };
        let iso = nodewright_core::cloud::proxmox::seed::build_iso(&files).expect("iso");
        let img = read(&iso).expect("readable");
        assert_eq!(img.label, "cidata");
        assert_eq!(
            img.files.get("user-data").map(Vec::as_slice),
            Some(files.user_data.as_bytes())
        );
        assert!(img.files.contains_key("meta-data"));
        assert!(read(&iso[..4096]).is_err());
        assert!(read(b"not an image").is_err());
    }
}
