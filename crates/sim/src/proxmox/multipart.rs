//! `multipart/form-data` request bodies (RFC 7578), as Proxmox's upload endpoint takes
//! them: text fields, and the file as the part named `filename` whose own `filename`
//! parameter is the name to store it under. Malformed bodies are refused.

/// One part of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    /// The `filename` parameter of its `Content-Disposition` (a file part).
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

/// The boundary of a `multipart/form-data` content type, if it is one.
pub fn boundary(content_type: &str) -> Option<String> {
    let mut it = content_type.split(';');
    if !it
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    it.find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.eq_ignore_ascii_case("boundary")
            .then(|| v.trim_matches('"').to_string())
    })
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// A quoted or bare parameter of a `Content-Disposition` value.
fn param(disposition: &str, key: &str) -> Option<String> {
    disposition.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(key)
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Splits `body` into its parts.
pub fn parse(boundary: &str, body: &[u8]) -> Result<Vec<Part>, String> {
    let delim = format!("--{boundary}");
    let mut at = find(body, delim.as_bytes(), 0).ok_or("multipart body without its boundary")?;
    let mut parts = Vec::new();
    loop {
        at += delim.len();
        if body.get(at..at + 2) == Some(b"--") {
            return Ok(parts);
        }
        if body.get(at..at + 2) != Some(b"\r\n") {
            return Err("malformed multipart boundary line".into());
        }
        at += 2;
        let head_end = find(body, b"\r\n\r\n", at).ok_or("multipart part without headers")?;
        let head = String::from_utf8_lossy(&body[at..head_end]).into_owned();
        let next = find(body, format!("\r\n{delim}").as_bytes(), head_end + 4)
            .ok_or("multipart body not closed by its boundary")?;
        let disposition = head
            .split("\r\n")
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-disposition")
                    .then(|| v.trim().to_string())
            })
            .ok_or("multipart part without Content-Disposition")?;
        let name = param(&disposition, "name").ok_or("multipart part without a name")?;
        parts.push(Part {
            name,
            filename: param(&disposition, "filename"),
            data: body[head_end + 4..next].to_vec(),
        });
        at = next + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_a_file() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\niso\r\n--XyZ\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"a.iso\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\x01\r\n--\r\n--XyZ--\r\n";
        let b = boundary("multipart/form-data; boundary=XyZ").expect("multipart");
        let parts = parse(&b, body).expect("parses");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "content");
        assert_eq!(parts[0].data, b"iso");
        assert_eq!(parts[1].filename.as_deref(), Some("a.iso"));
        assert_eq!(parts[1].data, b"\x00\x01\r\n--");
        assert!(parse("XyZ", b"--XyZ\r\nno headers").is_err());
        assert_eq!(boundary("application/x-www-form-urlencoded"), None);
    }
}
