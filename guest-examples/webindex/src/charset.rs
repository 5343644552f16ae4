//! Character encodings of crawled pages: `raw:html` is bytes, as fetched; [`decode`] turns them
//! into text the way a browser would, for the encodings of the WHATWG Encoding Standard
//! (`encoding_rs`).
//!
//! The encoding is, in order of precedence:
//!
//! 1. a byte order mark (UTF-8, UTF-16LE, UTF-16BE), which is removed;
//! 2. a `<meta charset="…">` or `<meta http-equiv="Content-Type" content="…; charset=…">` in the
//!    first 1024 bytes (a simplified form of the HTML prescan: the first `charset=` inside a
//!    `<meta` tag). A label the standard does not know is ignored; a UTF-16 label means UTF-8
//!    (a page whose `<meta>` is readable as ASCII is not UTF-16), `x-user-defined` means
//!    windows-1252;
//! 3. otherwise UTF-8 if the bytes are valid UTF-8, and windows-1252 if not (the web's usual
//!    fallback for unlabelled pages; it maps every byte).
//!
//! Bytes not valid in the chosen encoding become U+FFFD: decoding never fails, so a page with a
//! stray byte is indexed rather than rejected. (There is no HTTP `Content-Type` header to
//! consult: the crawl stores only the body.)

use std::borrow::Cow;

use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE, WINDOWS_1252, X_USER_DEFINED};

/// How many leading bytes are searched for a `<meta>` charset (as the HTML prescan does).
pub const PRESCAN_BYTES: usize = 1024;

/// `raw` decoded, and the name of the encoding used (`"UTF-8"`, `"windows-1252"`, `"Shift_JIS"`, …).
///
/// ```
/// use webindex::charset::decode;
/// assert_eq!(decode("<p>café</p>".as_bytes()), ("<p>café</p>".into(), "UTF-8"));
/// // Latin-1 bytes without a label: not UTF-8, so windows-1252.
/// assert_eq!(decode(b"<p>caf\xe9 \x93quoted\x94</p>"), ("<p>café “quoted”</p>".into(), "windows-1252"));
/// // A label wins over the UTF-8 guess.
/// let sjis = b"<meta charset=shift_jis><p>\x93\xfa\x96\x7b</p>";
/// assert_eq!(decode(sjis), ("<meta charset=shift_jis><p>日本</p>".into(), "Shift_JIS"));
/// ```
pub fn decode(raw: &[u8]) -> (Cow<'_, str>, &'static str) {
    let encoding = if let Some((bom, _)) = Encoding::for_bom(raw) {
        bom
    } else if let Some(declared) = declared(raw) {
        declared
    } else if let Ok(text) = std::str::from_utf8(raw) {
        // What `UTF_8.decode` would return (no BOM, valid): without validating it again.
        return (Cow::Borrowed(text), UTF_8.name());
    } else {
        WINDOWS_1252
    };
    // `decode` sniffs the BOM again (and removes it); invalid sequences become U+FFFD.
    let (text, used, _had_errors) = encoding.decode(raw);
    (text, used.name())
}

/// The encoding a `<meta>` in the first [`PRESCAN_BYTES`] declares, if it names one.
fn declared(raw: &[u8]) -> Option<&'static Encoding> {
    let head = &raw[..raw.len().min(PRESCAN_BYTES)];
    let mut at = 0;
    while let Some(start) = find_ci(&head[at..], b"<meta").map(|i| at + i) {
        let after = start + b"<meta".len();
        // `<metadata>` is not `<meta>`.
        if head.get(after).is_some_and(|b| b.is_ascii_alphanumeric()) {
            at = after;
            continue;
        }
        let end = head[after..].iter().position(|&b| b == b'>').map_or(head.len(), |i| after + i);
        let tag = &head[after..end];
        if let Some(i) = find_ci(tag, b"charset") {
            let mut rest = &tag[i + b"charset".len()..];
            rest = trim_start(rest);
            if let Some(r) = rest.strip_prefix(b"=") {
                let value = trim_start(r);
                let value = value.strip_prefix(b"\"").or_else(|| value.strip_prefix(b"'")).unwrap_or(value);
                let len = value
                    .iter()
                    .position(|&b| matches!(b, b'"' | b'\'' | b';' | b'/' | b'>') || b.is_ascii_whitespace())
                    .unwrap_or(value.len());
                if let Some(encoding) = Encoding::for_label(&value[..len]) {
                    return Some(if encoding == UTF_16LE || encoding == UTF_16BE {
                        UTF_8
                    } else if encoding == X_USER_DEFINED {
                        WINDOWS_1252
                    } else {
                        encoding
                    });
                }
            }
        }
        at = end;
    }
    None
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

/// The first position of `needle` in `haystack`, ASCII case-insensitively.
fn find_ci(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(raw: &[u8]) -> &'static str {
        decode(raw).1
    }

    #[test]
    fn boms_win_and_are_removed() {
        assert_eq!(decode(b"\xef\xbb\xbf<p>x</p>"), ("<p>x</p>".into(), "UTF-8"));
        assert_eq!(decode(b"\xff\xfe<\0p\0>\0"), ("<p>".into(), "UTF-16LE"));
        assert_eq!(decode(b"\xfe\xff\0<\0p\0>"), ("<p>".into(), "UTF-16BE"));
        // A BOM beats a contradicting label.
        assert_eq!(name(b"\xef\xbb\xbf<meta charset=latin1>"), "UTF-8");
    }

    #[test]
    fn meta_labels_in_their_forms() {
        assert_eq!(name(b"<META CHARSET=\"ISO-8859-1\">"), "windows-1252");
        assert_eq!(name(b"<meta charset='koi8-r'/>"), "KOI8-R");
        assert_eq!(name(b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=EUC-JP\">"), "EUC-JP");
        assert_eq!(name(b"<meta content='text/html;charset = gbk'>"), "GBK");
        assert_eq!(name(b"<head><meta name=x><meta charset=\"  utf-8 \">"), "UTF-8");
        // Labels meaning something else.
        assert_eq!(name(b"<meta charset=utf-16>\xe9"), "UTF-8");
        assert_eq!(name(b"<meta charset=x-user-defined>\xe9"), "windows-1252");
    }

    #[test]
    fn what_is_not_a_label_is_ignored() {
        // Unknown label, a <metadata> tag, a charset outside any <meta>, a label after 1024 bytes.
        assert_eq!(name(b"<meta charset=klingon>caf\xc3\xa9"), "UTF-8");
        assert_eq!(name(b"<meta charset=klingon>caf\xe9"), "windows-1252");
        assert_eq!(name(b"<metadata charset=koi8-r>"), "UTF-8");
        assert_eq!(name(b"<p>charset=koi8-r</p>"), "UTF-8");
        let late = [vec![b' '; PRESCAN_BYTES], b"<meta charset=koi8-r>".to_vec()].concat();
        assert_eq!(name(&late), "UTF-8");
        assert_eq!(name(b"<meta charset>"), "UTF-8");
        assert_eq!(name(b"<meta charset="), "UTF-8");
        assert_eq!(name(b"<meta"), "UTF-8");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(decode(b"<meta charset=utf-8>a\xffb"), ("<meta charset=utf-8>a\u{fffd}b".into(), "UTF-8"));
        assert_eq!(decode(b""), ("".into(), "UTF-8"));
    }
}
