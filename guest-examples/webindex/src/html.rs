//! HTML parsing: title, visible text, links with anchor text; URL resolution and normalization.
//!
//! The parser is hand-written and tolerant: it never fails, whatever the input. It knows just
//! enough HTML for an index:
//!
//! - tags with quoted or unquoted attributes (names case-insensitive), comments `<!-- -->`,
//!   declarations (`<!DOCTYPE …>`) and processing instructions (`<? … >`), which are skipped;
//!   a `<` that does not start a tag is text;
//! - `<script>` and `<style>` contents are skipped (up to the matching end tag, or the end of
//!   the input); `<title>` contents are text of their own: the first one is the title, every
//!   one is kept out of the visible text;
//! - the entities `&amp; &lt; &gt; &quot; &apos; &nbsp;`, `&#NN;` and `&#xHH;` are decoded, in
//!   text and in attribute values; anything else starting with `&` is kept as written;
//! - block-level tags (open or close: `p`, `div`, `br`, `li`, `h1`–`h6`, `tr`, `td`, `title`, …)
//!   separate words, inline tags (`b`, `span`, `a`, …) do not: `<p>a</p><p>b</p>` is `a b`,
//!   `a<b>b</b>` is `ab`;
//! - whitespace (Unicode `White_Space`, which includes the no-break space) is collapsed to one
//!   space and trimmed, in the title, the text and each anchor;
//! - every `<a href>` is a link whose anchor is its text content; an `<a>` inside an open `<a>`
//!   closes it first (as browsers do), an `<a>` without `href` contributes text only, and an
//!   href that does not [`resolve`] to an http(s) URL of at most [`MAX_URL_BYTES`] is dropped.

use std::borrow::Cow;

/// A parsed page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Document {
    /// Text of the first `<title>`, whitespace collapsed.
    pub title: String,
    /// Visible text outside `<title>`, `<script>`, `<style>`, whitespace collapsed.
    pub text: String,
    /// Every `<a href>` whose href resolves to an http(s) URL, in document order.
    pub links: Vec<Link>,
}

/// One outgoing link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// Resolved, normalized absolute URL.
    pub target: String,
    /// Anchor text, whitespace collapsed (may be empty).
    pub anchor: String,
}

/// Whether the tag named `name` (any ASCII case) separates words, open or close. Every other
/// tag is inline. Lowercased into a buffer on the stack (a name longer than the longest block
/// tag is no block tag), then matched.
fn is_block(name: &str) -> bool {
    let mut lower = [0u8; 10];
    let Some(name) = lower.get_mut(..name.len()).map(|buf| {
        buf.copy_from_slice(name.as_bytes());
        buf.make_ascii_lowercase();
        &*buf
    }) else {
        return false;
    };
    matches!(
        name,
        b"address"
            | b"article"
            | b"aside"
            | b"blockquote"
            | b"body"
            | b"br"
            | b"caption"
            | b"dd"
            | b"details"
            | b"dialog"
            | b"div"
            | b"dl"
            | b"dt"
            | b"fieldset"
            | b"figcaption"
            | b"figure"
            | b"footer"
            | b"form"
            | b"h1"
            | b"h2"
            | b"h3"
            | b"h4"
            | b"h5"
            | b"h6"
            | b"head"
            | b"header"
            | b"hr"
            | b"html"
            | b"img"
            | b"input"
            | b"legend"
            | b"li"
            | b"main"
            | b"menu"
            | b"nav"
            | b"ol"
            | b"option"
            | b"p"
            | b"pre"
            | b"section"
            | b"select"
            | b"summary"
            | b"table"
            | b"tbody"
            | b"td"
            | b"textarea"
            | b"tfoot"
            | b"th"
            | b"thead"
            | b"title"
            | b"tr"
            | b"ul"
    )
}

/// Parses `html` fetched from `base_url`.
///
/// ```
/// let doc = webindex::html::parse(
///     "http://example.com/a/b.html",
///     "<title>Hi &amp; bye</title><p>one</p><p>two <a href='../c#x'>three <b>four</b></a></p>",
/// );
/// assert_eq!(doc.title, "Hi & bye");
/// assert_eq!(doc.text, "one two three four");
/// assert_eq!(doc.links[0].target, "http://example.com/c");
/// assert_eq!(doc.links[0].anchor, "three four");
/// ```
pub fn parse(base_url: &str, html: &str) -> Document {
    let base = parse_absolute(base_url.trim());
    let mut p = Parser { base, title: None, text: String::new(), anchor: None, links: Vec::new() };
    let bytes = html.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let lt = html[i..].find('<').map_or(bytes.len(), |j| i + j);
        p.text(&html[i..lt]);
        i = lt;
        if i >= bytes.len() {
            break;
        }
        let rest = &html[i..];
        let next = bytes.get(i + 1).copied();
        if let Some(comment) = rest.strip_prefix("<!--") {
            i = comment.find("-->").map_or(bytes.len(), |j| i + 4 + j + 3);
        } else if matches!(next, Some(b'!' | b'?'))
            || (next == Some(b'/') && !bytes.get(i + 2).is_some_and(u8::is_ascii_alphabetic))
        {
            // A declaration, a processing instruction, or a bogus end tag: skipped to `>`.
            i = skip_past(html, i, ">");
        } else if next.is_some_and(|b| b.is_ascii_alphabetic() || b == b'/') {
            let (tag, end) = Tag::parse(html, i);
            i = p.tag(html, &tag, end);
        } else {
            p.text("<");
            i += 1;
        }
    }
    p.finish()
}

/// The parse state.
struct Parser<'a> {
    /// `base_url`, parsed once (`None`: not an http(s) URL, so only absolute links resolve).
    base: Option<Url<'a>>,
    /// The first title, once seen.
    title: Option<String>,
    /// Visible text, not yet collapsed.
    text: String,
    /// The open `<a>`: its href (if any) and its text so far.
    anchor: Option<(Option<String>, String)>,
    links: Vec<Link>,
}

impl Parser<'_> {
    /// Text content (entities not yet decoded).
    fn text(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let decoded = decode_entities(raw);
        self.text.push_str(&decoded);
        if let Some((_, anchor)) = &mut self.anchor {
            anchor.push_str(&decoded);
        }
    }

    /// A word separator.
    fn separate(&mut self) {
        self.text.push(' ');
        if let Some((_, anchor)) = &mut self.anchor {
            anchor.push(' ');
        }
    }

    fn close_anchor(&mut self) {
        if let Some((Some(href), text)) = self.anchor.take()
            && let Some(target) = resolve_against(self.base.as_ref(), &href)
        {
            self.links.push(Link { target, anchor: collapse(&text) });
        }
    }

    /// Handles a tag ending at `end`; returns where parsing continues.
    fn tag(&mut self, html: &str, tag: &Tag<'_>, end: usize) -> usize {
        if is_block(tag.name) {
            self.separate();
        }
        let is = |name: &str| tag.name.eq_ignore_ascii_case(name);
        if tag.closing {
            if is("a") {
                self.close_anchor();
            }
            end
        } else if is("a") {
            self.close_anchor();
            self.anchor = Some((tag.href.map(|h| decode_entities(h).into_owned()), String::new()));
            end
        } else if is("script") {
            raw_text_end(html, end, "script").1
        } else if is("style") {
            raw_text_end(html, end, "style").1
        } else if is("title") {
            let (content_end, next) = raw_text_end(html, end, "title");
            if self.title.is_none() {
                self.title = Some(collapse(&decode_entities(&html[end..content_end])));
            }
            next
        } else {
            end
        }
    }

    fn finish(mut self) -> Document {
        self.close_anchor();
        Document { title: self.title.unwrap_or_default(), text: collapse(&self.text), links: self.links }
    }
}

/// A start or end tag: slices of the input, nothing copied.
struct Tag<'h> {
    /// The name as written (compared ASCII case-insensitively).
    name: &'h str,
    closing: bool,
    /// The value of the first attribute named `href` (any ASCII case; as browsers do with
    /// duplicates), entities not yet decoded; `""` for an `href` without a value.
    href: Option<&'h str>,
}

impl<'h> Tag<'h> {
    /// Parses the tag starting at `html[start] == '<'`; returns it and the index after its `>`
    /// (or the end of the input).
    fn parse(html: &'h str, start: usize) -> (Tag<'h>, usize) {
        let b = html.as_bytes();
        let is_space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0c);
        let mut k = start + 1;
        let closing = b.get(k) == Some(&b'/');
        if closing {
            k += 1;
        }
        let name_start = k;
        while k < b.len() && !is_space(b[k]) && b[k] != b'/' && b[k] != b'>' {
            k += 1;
        }
        let name = &html[name_start..k];
        let mut href = None;
        loop {
            while k < b.len() && (is_space(b[k]) || b[k] == b'/') {
                k += 1;
            }
            if k >= b.len() {
                break;
            }
            if b[k] == b'>' {
                k += 1;
                break;
            }
            let attr_start = k;
            k += 1; // at least one character, even a stray '='
            while k < b.len() && !is_space(b[k]) && !matches!(b[k], b'/' | b'>' | b'=') {
                k += 1;
            }
            let is_href = href.is_none() && b[attr_start..k].eq_ignore_ascii_case(b"href");
            let mut j = k;
            while j < b.len() && is_space(b[j]) {
                j += 1;
            }
            let mut value = "";
            if b.get(j) == Some(&b'=') {
                j += 1;
                while j < b.len() && is_space(b[j]) {
                    j += 1;
                }
                match b.get(j) {
                    Some(&q @ (b'"' | b'\'')) => {
                        let value_start = j + 1;
                        let value_end = html[value_start..].find(q as char).map_or(b.len(), |e| value_start + e);
                        value = &html[value_start..value_end];
                        k = (value_end + 1).min(b.len());
                    }
                    _ => {
                        let value_start = j;
                        while j < b.len() && !is_space(b[j]) && b[j] != b'>' {
                            j += 1;
                        }
                        value = &html[value_start..j];
                        k = j;
                    }
                }
            }
            if is_href {
                href = Some(value);
            }
        }
        (Tag { name, closing, href }, k)
    }
}

/// Finds the end tag `</name` (ASCII case-insensitive) from `from`: returns where the content
/// ends and the index after the end tag's `>` (both the end of the input if there is none).
fn raw_text_end(html: &str, from: usize, name: &str) -> (usize, usize) {
    let b = html.as_bytes();
    let n = name.len();
    let mut k = from;
    while let Some(j) = html[k..].find("</") {
        let at = k + j;
        let after = at + 2 + n;
        if after <= b.len()
            && b[at + 2..after].eq_ignore_ascii_case(name.as_bytes())
            && b.get(after).is_none_or(|c| !c.is_ascii_alphanumeric())
        {
            return (at, skip_past(html, after, ">"));
        }
        k = at + 2;
    }
    (b.len(), b.len())
}

/// The index after the first `pat` at or after `from`, or the end of the input.
fn skip_past(html: &str, from: usize, pat: &str) -> usize {
    html[from..].find(pat).map_or(html.len(), |j| from + j + pat.len())
}

/// Collapses runs of whitespace (`char::is_whitespace`) to one space and trims: the words of
/// `s.split_whitespace()` joined by one space, scanned a byte at a time where `s` is ASCII.
fn collapse(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    // Where the current word started, if inside one.
    let mut word: Option<usize> = None;
    let mut i = 0;
    while i < b.len() {
        let (space, len) = if b[i].is_ascii() {
            (matches!(b[i], b'\t'..=b'\r' | b' '), 1)
        } else {
            // `i` is a character boundary: it only ever advances by whole characters.
            let c = s[i..].chars().next().unwrap_or_default();
            (c.is_whitespace(), c.len_utf8())
        };
        match (space, word) {
            (true, Some(start)) => {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&s[start..i]);
                word = None;
            }
            (false, None) => word = Some(i),
            _ => {}
        }
        i += len;
    }
    if let Some(start) = word {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s[start..]);
    }
    out
}

/// Decodes the known entities; anything else is kept as written.
fn decode_entities(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        rest = &rest[p..];
        match decode_entity(rest) {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Decodes the entity at the start of `s` (which starts with `&`): the character and the
/// entity's length.
fn decode_entity(s: &str) -> Option<(char, usize)> {
    // The longest known entity is `&#x10FFFF;`; don't look further for the `;`.
    let semi = s.bytes().take(12).position(|b| b == b';')?;
    let name = &s[1..semi];
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        _ => {
            let num = name.strip_prefix('#')?;
            let (digits, radix) = match num.strip_prefix(['x', 'X']) {
                Some(hex) => (hex, 16),
                None => (num, 10),
            };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            let code = u32::from_str_radix(digits, radix).ok()?;
            if code == 0 {
                return None;
            }
            char::from_u32(code)?
        }
    };
    Some((c, semi + 1))
}

/// An absolute http(s) URL, split into parts (borrowed from the href or the base where they
/// can be).
struct Url<'a> {
    /// Lowercased: `"http"` or `"https"`.
    scheme: &'static str,
    /// `userinfo@host:port`, host lowercased, default port dropped.
    authority: Cow<'a, str>,
    /// Starts with `/` (not yet dot-normalized).
    path: Cow<'a, str>,
    query: Option<&'a str>,
}

impl Url<'_> {
    fn to_normalized(&self) -> String {
        let path = remove_dot_segments(&self.path);
        let query_len = self.query.map_or(0, |q| q.len() + 1);
        let mut out = String::with_capacity(self.scheme.len() + 3 + self.authority.len() + path.len() + query_len);
        out.push_str(self.scheme);
        out.push_str("://");
        out.push_str(&self.authority);
        out.push_str(&path);
        if let Some(q) = self.query {
            out.push('?');
            out.push_str(q);
        }
        out
    }
}

/// `"http"` or `"https"` if `scheme` is one of them (any ASCII case).
fn http_scheme(scheme: &str) -> Option<&'static str> {
    if scheme.eq_ignore_ascii_case("http") {
        Some("http")
    } else if scheme.eq_ignore_ascii_case("https") {
        Some("https")
    } else {
        None
    }
}

/// The scheme of `s` if it starts with one (`[A-Za-z][A-Za-z0-9+.-]*:`): the scheme and the
/// rest after the `:`.
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    let colon = s.find(':')?;
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then(|| (scheme, &s[colon + 1..]))
}

/// Splits `s` (no fragment) into the part before `?` and the query.
fn split_query(s: &str) -> (&str, Option<&str>) {
    match s.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (s, None),
    }
}

/// Normalizes an authority: lowercase host, empty or default port dropped. `None` if it has no
/// host, a bad port, or a `:`, `[` or `]` in the host outside one IPv6-style literal `[...]`
/// (`h::80`, `h:p:`, `[::1]x`): such a host would read differently once normalized.
fn normalize_authority(scheme: &str, authority: &str) -> Option<String> {
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(literal) = hostport.strip_prefix('[') {
        // `[...]`, then nothing or `:port`.
        let close = literal.find(']')?;
        let (inner, rest) = (&literal[..close], &literal[close + 1..]);
        if inner.is_empty() || inner.contains('[') {
            return None;
        }
        let port = if rest.is_empty() { "" } else { rest.strip_prefix(':')? };
        (&hostport[..close + 2], port)
    } else {
        // The first ':' ends the host; a second one makes the port bad.
        let (host, port) = hostport.split_once(':').unwrap_or((hostport, ""));
        if host.contains(['[', ']']) {
            return None;
        }
        (host, port)
    };
    if host.is_empty() {
        return None;
    }
    let port = if port.is_empty() {
        None
    } else {
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u16 = port.parse().ok()?;
        let default = if scheme == "https" { 443 } else { 80 };
        (n != default).then_some(n)
    };
    let mut out = String::with_capacity(authority.len());
    if let Some(u) = userinfo {
        out.push_str(u);
        out.push('@');
    }
    out.push_str(&host.to_lowercase());
    if let Some(n) = port {
        out.push(':');
        out.push_str(&n.to_string());
    }
    Some(out)
}

/// Parses `//authority/path?query` (fragment already removed) for `scheme`.
fn parse_network_path<'a>(scheme: &'static str, s: &'a str) -> Option<Url<'a>> {
    let s = s.trim_start_matches('/');
    let auth_end = s.find(['/', '?']).unwrap_or(s.len());
    let authority = Cow::Owned(normalize_authority(scheme, &s[..auth_end])?);
    let (path, query) = split_query(&s[auth_end..]);
    let path = if path.is_empty() { Cow::Borrowed("/") } else { Cow::Borrowed(path) };
    Some(Url { scheme, authority, path, query })
}

/// Parses an absolute http(s) URL.
fn parse_absolute(url: &str) -> Option<Url<'_>> {
    let url = url.split('#').next().unwrap_or_default();
    let (scheme, rest) = split_scheme(url)?;
    parse_network_path(http_scheme(scheme)?, rest)
}

/// Longest URL [`resolve`] returns, in bytes: row keys join two URLs (`inlinks/"T P"`,
/// `fwd/"C T"`), and `2 * 2040 + 1` fits the store's 4096-byte limit on row keys.
pub const MAX_URL_BYTES: usize = 2040;
const _: () = assert!(2 * MAX_URL_BYTES < 4096, "two URLs joined by a space fit in a row key");

/// Resolves `href` against `base` and normalizes it; `None` for fragments-only, non-http(s)
/// schemes, hrefs containing whitespace and results longer than [`MAX_URL_BYTES`].
///
/// Follows RFC 3986 section 5.2 (with the WHATWG reading of `http:foo`): `//host/p` takes the
/// base's scheme, `/p` the base's origin, a relative path the base's directory; `.` and `..`
/// segments are resolved, the fragment is dropped and the query kept as written; scheme and
/// host are lowercased, an empty path becomes `/` and an empty or default port (80 for http,
/// 443 for https) is dropped. Percent-encoding is left as written. `None` also when the result
/// would have no host, a bad port or a `:`, `[` or `]` in the host outside an IPv6-style
/// literal (`h::80`, `h:a:`), or when `href` is relative and `base` is not an http(s) URL.
///
/// The result is normalized: `resolve(&t, &t) == Some(t)` for every `Some(t)` it returns.
///
/// ```
/// use webindex::html::resolve;
/// let base = "http://example.com/a/b.html?x=1";
/// assert_eq!(resolve(base, "../c.html#top").as_deref(), Some("http://example.com/c.html"));
/// assert_eq!(resolve(base, "HTTPS://Example.COM:443").as_deref(), Some("https://example.com/"));
/// assert_eq!(resolve(base, "mailto:someone@example.com"), None);
/// assert_eq!(resolve(base, "#top"), None);
/// assert_eq!(resolve(base, &format!("/{}", "x".repeat(2040))), None);
/// ```
pub fn resolve(base: &str, href: &str) -> Option<String> {
    resolve_against(parse_absolute(base.trim()).as_ref(), href)
}

/// [`resolve`] against a base already parsed (`None`: not an http(s) URL), as a page's links
/// are: the base is parsed once per page.
fn resolve_against(base: Option<&Url<'_>>, href: &str) -> Option<String> {
    let href = href.trim();
    if href.is_empty() || href.starts_with('#') || has_whitespace(href) {
        return None;
    }
    let href = href.split('#').next().unwrap_or_default();
    let url = match split_scheme(href) {
        Some((scheme, rest)) => {
            let scheme = http_scheme(scheme)?;
            match base {
                // `http:p` against an http base is relative (WHATWG); `http:p` otherwise, like
                // `http:/p` and `http://p`, names the host `p`.
                Some(b) if b.scheme == scheme && !rest.starts_with('/') => relative(b, rest),
                _ => parse_network_path(scheme, rest)?,
            }
        }
        None => {
            let b = base?;
            if href.starts_with("//") { parse_network_path(b.scheme, href)? } else { relative(b, href) }
        }
    };
    let url = url.to_normalized();
    // Whitespace can only come from a base that has some (a page's URL is checked first).
    (url.len() <= MAX_URL_BYTES && !has_whitespace(&url)).then_some(url)
}

/// Whether `s` contains a `char::is_whitespace` character; bytes compared where `s` is ASCII
/// (every URL of a crawl, nearly).
fn has_whitespace(s: &str) -> bool {
    // No early exit: a loop the compiler can vectorize.
    let maybe = s.bytes().fold(false, |any, b| any | (b <= b' ') | (b >= 0x80));
    maybe && s.contains(char::is_whitespace)
}

/// Checks that `url` can be a page's row key: a normalized http(s) URL
/// (`resolve(url, url) == Some(url)`), hence at most [`MAX_URL_BYTES`] long and without
/// whitespace. The error says why not, e.g. `the row key is not a normalized http(s) URL
/// (expected "http://a.org/")`.
///
/// ```
/// use webindex::html::check_url_key;
/// assert_eq!(check_url_key("http://a.org/"), Ok(()));
/// assert!(check_url_key("HTTP://a.org/").unwrap_err().ends_with("(expected \"http://a.org/\")"));
/// assert!(check_url_key(&format!("http://a.org/{}", "x".repeat(2040))).unwrap_err().contains("2040"));
/// ```
pub fn check_url_key(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!(
            "the row key is {} bytes, longer than the {MAX_URL_BYTES} a URL may have (rows joining two URLs \
             must fit the store's 4096-byte limit)",
            url.len()
        ));
    }
    match resolve(url, url) {
        Some(n) if n == url => Ok(()),
        Some(n) => Err(format!("the row key is not a normalized http(s) URL (expected {n:?})")),
        None => Err("the row key is not a normalized http(s) URL".to_owned()),
    }
}

/// Resolves a relative reference without scheme or authority against `base`.
fn relative<'a>(base: &'a Url<'_>, href: &'a str) -> Url<'a> {
    let authority = Cow::Borrowed(&*base.authority);
    let (path, query) = split_query(href);
    if path.is_empty() {
        // `?q` (or nothing): the base path with the new query.
        let query = query.or(if href.is_empty() { base.query } else { None });
        return Url { scheme: base.scheme, authority, path: Cow::Borrowed(&*base.path), query };
    }
    let path = if path.starts_with('/') {
        Cow::Borrowed(path)
    } else {
        let dir = &base.path[..base.path.rfind('/').map_or(0, |i| i + 1)];
        let mut joined = String::with_capacity(dir.len() + path.len());
        joined.push_str(dir);
        joined.push_str(path);
        Cow::Owned(joined)
    };
    Url { scheme: base.scheme, authority, path, query }
}

/// Resolves `.` and `..` segments of an absolute path (RFC 3986 section 5.2.4). A path that
/// starts with `/` and has no `/.` (most of them) has none and is returned as it is.
fn remove_dot_segments(path: &str) -> Cow<'_, str> {
    // Every `.` or `..` segment after the first `/` starts with `/.`.
    if path.starts_with('/') && !path.contains("/.") {
        return Cow::Borrowed(path);
    }
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => {
                out.push(s);
                continue;
            }
        }
        if last {
            out.push(""); // `a/.` and `a/..` end with a slash
        }
    }
    Cow::Owned(format!("/{}", out.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(target: &str, anchor: &str) -> Link {
        Link { target: target.into(), anchor: anchor.into() }
    }

    #[test]
    fn title_text_and_whitespace() {
        let doc = parse(
            "http://x.org/",
            "<!DOCTYPE html>\n<HTML><Head><TITLE>  The\n Title </TITLE></head>\
             <body><p>a</p><p>b</p> c<b>d</b>e<br>f<div>g\t\th</div></body></html>",
        );
        assert_eq!(doc.title, "The Title");
        assert_eq!(doc.text, "a b cde f g h");
        assert!(doc.links.is_empty());
    }

    #[test]
    fn comments_script_style_and_second_title_are_skipped() {
        let doc = parse(
            "http://x.org/",
            "<title>first</title><!-- <p>hidden</p> --><script type=\"x\">if (a < b) { x = '</p>' }</SCRIPT >\
             <style>p { color: red }</style>shown<title>second</title>too<?php echo 1 ?>",
        );
        assert_eq!(doc.title, "first");
        assert_eq!(doc.text, "shown too");
    }

    #[test]
    fn unterminated_constructs_swallow_the_rest() {
        assert_eq!(parse("http://x.org/", "a<!-- b").text, "a");
        assert_eq!(parse("http://x.org/", "a<script>b").text, "a");
        assert_eq!(parse("http://x.org/", "<title>t").title, "t");
        assert_eq!(parse("http://x.org/", "a<p class='x").text, "a");
        assert_eq!(parse("http://x.org/", "").title, "");
    }

    /// `collapse` scans bytes where it can: it must still split exactly where
    /// `split_whitespace` does, for every whitespace character (ASCII or not) and its neighbours.
    #[test]
    fn collapse_is_split_whitespace_joined() {
        let reference = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut checked = 0;
        for c in (0..0x3100).filter_map(char::from_u32).chain(['\u{feff}', '\u{1f600}']) {
            for s in [format!("{c}"), format!(" a{c}b{c}{c}c\u{a0}{c}"), format!("{c}x{c}é{c} 日本{c}")] {
                assert_eq!(collapse(&s), reference(&s), "{s:?} (U+{:04X})", u32::from(c));
                checked += 1;
            }
        }
        assert!(checked > 30_000);
        assert_eq!(collapse(""), "");
        assert_eq!(collapse(" \t\n"), "");
    }

    #[test]
    fn block_tags_in_any_case() {
        for name in
            ["p", "P", "div", "DiV", "br", "h1", "H6", "li", "blockquote", "FIGCAPTION", "textarea", "title", "ul"]
        {
            assert!(is_block(name), "{name}");
        }
        for name in ["", "a", "b", "span", "code", "h7", "blockquotes", "figcaptions", "lis", "pre-x", "headers", "é"]
        {
            assert!(!is_block(name), "{name}");
        }
        assert_eq!(parse("http://x.org/", "a<DIV>b</Div>c<Span>d</SPAN>e<H2>f").text, "a b cde f");
    }

    #[test]
    fn paths_without_dot_segments_are_not_copied() {
        for path in ["/", "/a/b.html", "/a..b/c/d.", "/x/"] {
            assert!(matches!(remove_dot_segments(path), Cow::Borrowed(p) if p == path), "{path}");
        }
        assert_eq!(remove_dot_segments("/a/./b/../c/."), "/a/c/");
        assert_eq!(remove_dot_segments("a/b"), "/a/b");
    }

    #[test]
    fn stray_angle_brackets_are_text() {
        assert_eq!(parse("http://x.org/", "1 < 2 > 0 <3 </ x> y").text, "1 < 2 > 0 <3 y");
    }

    #[test]
    fn entities() {
        let doc = parse(
            "http://x.org/",
            "<title>a&amp;b</title>&lt;x&gt; &quot;q&quot; &#39;s&apos; a&nbsp;b &#65;&#x42;&#X43; \
             &copy; AT&T &amp &#xZZ; &#0; &amp;lt;",
        );
        assert_eq!(doc.title, "a&b");
        assert_eq!(doc.text, "<x> \"q\" 's' a b ABC &copy; AT&T &amp &#xZZ; &#0; &lt;");
    }

    #[test]
    fn links_in_document_order() {
        let doc = parse(
            "http://x.org/dir/page.html",
            "<a href=\"/one\">One</a> <A HREF='two.html'>Two <i>and\n a half</i></a> \
             <a name=x>no href</a> <a href=three>3 <a href=four>4</a> \
             <a href=\"mailto:me@x.org\">mail</a> <a href='#top'>top</a> <a href=\"a b\">space</a>\
             <a href=/five/>  </a><p><a href=\"six?q=1&amp;r=2\">six</p></a><a href>empty</a>",
        );
        assert_eq!(
            doc.links,
            vec![
                link("http://x.org/one", "One"),
                link("http://x.org/dir/two.html", "Two and a half"),
                link("http://x.org/dir/three", "3"),
                link("http://x.org/dir/four", "4"),
                link("http://x.org/five/", ""),
                link("http://x.org/dir/six?q=1&r=2", "six"),
            ]
        );
        assert_eq!(doc.text, "One Two and a half no href 3 4 mail top space six empty");
    }

    #[test]
    fn unclosed_anchor_ends_at_end_of_input() {
        let doc = parse("http://x.org/", "<a href=/a>dangling");
        assert_eq!(doc.links, vec![link("http://x.org/a", "dangling")]);
    }

    #[test]
    fn attribute_forms() {
        let doc = parse(
            "http://x.org/",
            "<a class = \"c\" data-x='1>2' Href = /q/>q</a><a href=\"/u\"href=\"/v\">u</a><a href=a&amp;b>e</a>",
        );
        assert_eq!(
            doc.links,
            vec![link("http://x.org/q/", "q"), link("http://x.org/u", "u"), link("http://x.org/a&b", "e")]
        );
    }

    #[test]
    fn resolve_relative_references() {
        let base = "http://a.org/b/c/d;p?q";
        let cases = [
            ("g", "http://a.org/b/c/g"),
            ("./g", "http://a.org/b/c/g"),
            ("g/", "http://a.org/b/c/g/"),
            ("/g", "http://a.org/g"),
            ("//g", "http://g/"),
            ("?y", "http://a.org/b/c/d;p?y"),
            ("g?y", "http://a.org/b/c/g?y"),
            ("g#s", "http://a.org/b/c/g"),
            (".", "http://a.org/b/c/"),
            ("..", "http://a.org/b/"),
            ("../g", "http://a.org/b/g"),
            ("../../../../g", "http://a.org/g"),
            ("/./g", "http://a.org/g"),
            ("g/./h/../i", "http://a.org/b/c/g/i"),
            ("http:g", "http://a.org/b/c/g"),
            ("https:g", "https://g/"),
            ("  g  ", "http://a.org/b/c/g"),
        ];
        for (href, want) in cases {
            assert_eq!(resolve(base, href).as_deref(), Some(want), "{href}");
        }
    }

    #[test]
    fn resolve_normalizes() {
        let base = "https://Ex.org";
        assert_eq!(resolve(base, "x").as_deref(), Some("https://ex.org/x"));
        assert_eq!(resolve(base, "//Other.ORG").as_deref(), Some("https://other.org/"));
        assert_eq!(resolve(base, "HTTP://H.org:80/P?Q#F").as_deref(), Some("http://h.org/P?Q"));
        assert_eq!(resolve(base, "https://h.org:443").as_deref(), Some("https://h.org/"));
        assert_eq!(resolve(base, "https://h.org:80/").as_deref(), Some("https://h.org:80/"));
        assert_eq!(resolve(base, "http://h.org:8080/").as_deref(), Some("http://h.org:8080/"));
        assert_eq!(resolve(base, "http://h.org:/").as_deref(), Some("http://h.org/"));
        assert_eq!(resolve(base, "http://u@H.org/").as_deref(), Some("http://u@h.org/"));
        assert_eq!(resolve(base, "http://[::1]:8080/").as_deref(), Some("http://[::1]:8080/"));
        assert_eq!(resolve(base, "http://h.org?q").as_deref(), Some("http://h.org/?q"));
        assert_eq!(resolve(base, "http://[::1]/").as_deref(), Some("http://[::1]/"));
        assert_eq!(resolve(base, "http://[::1]:/").as_deref(), Some("http://[::1]/"));
        assert_eq!(resolve(base, "http://u:p@[::A]:80/").as_deref(), Some("http://u:p@[::a]/"));
        assert_eq!(resolve(base, "http://a:b@c@h.org:081/").as_deref(), Some("http://a:b@c@h.org:81/"));
    }

    #[test]
    fn resolve_limits_the_length() {
        let base = "http://a.org/";
        let fits = format!("/{}", "x".repeat(MAX_URL_BYTES - base.len()));
        let url = resolve(base, &fits).unwrap();
        assert_eq!(url.len(), MAX_URL_BYTES);
        assert_eq!(resolve(base, &format!("{fits}y")), None);
        assert_eq!(resolve(base, &format!("{fits}?")), None, "the query counts");
        // Dot segments are resolved before the length is checked.
        assert_eq!(resolve(base, &format!("{fits}y/..")).as_deref(), Some(base));
        assert_eq!(resolve(base, &format!("/y/..{fits}")).as_deref(), Some(url.as_str()));
        // A link to it is dropped, like any other unusable href.
        let doc = parse(base, &format!("<a href='{fits}y'>long</a><a href=/ok>ok</a>"));
        assert_eq!(doc.links, vec![link("http://a.org/ok", "ok")]);
    }

    #[test]
    fn url_keys() {
        assert_eq!(check_url_key("http://a.org/x"), Ok(()));
        assert_eq!(
            check_url_key("HTTP://A.org/x"),
            Err("the row key is not a normalized http(s) URL (expected \"http://a.org/x\")".to_owned())
        );
        assert_eq!(check_url_key("a.org/x"), Err("the row key is not a normalized http(s) URL".to_owned()));
        let long = format!("http://a.org/{}", "x".repeat(MAX_URL_BYTES));
        let err = check_url_key(&long).unwrap_err();
        assert!(err.starts_with(&format!("the row key is {} bytes, longer than the 2040", long.len())), "{err}");
    }

    #[test]
    fn resolve_rejects() {
        let base = "http://a.org/b";
        for href in [
            "",
            "   ",
            "#",
            "#frag",
            "mailto:x@a.org",
            "javascript:void(0)",
            "ftp://a.org/",
            "a b",
            "a\tb",
            "a\u{a0}b",
            "http://",
            "http://h.org:x/",
            "http://h.org:99999/",
            "http://h.org::80/",
            "http://h.org:80:/",
            "http://h:x:/",
            "//ftp:HTTP:?&",
            "http://[::1]x/",
            "http://[::1]:x/",
            "http://[]/",
            "http://[[::1]/",
            "http://h[1]/",
            "http://h]/",
            "http://[::1/",
            "http://u@:80/",
        ] {
            assert_eq!(resolve(base, href), None, "{href:?}");
        }
        assert_eq!(resolve("not a url", "g"), None);
        assert_eq!(resolve("not a url", "http://h.org/").as_deref(), Some("http://h.org/"));
        assert_eq!(resolve("http://a.org/x y/", "g"), None, "whitespace from the base");
    }

    /// Every result of `resolve` is normalized, for many hrefs made of the characters that
    /// matter to URL syntax, against bases of every shape.
    #[test]
    fn resolve_is_idempotent() {
        const PIECES: &[&str] = &[
            ":", "/", "//", ".", "..", "?", "#", "@", "[", "]", "a", "B", "h", "x", "0", "8", "80", "443", "%2e",
            "::1", "http:", "HTTPS:", "http://", "https://", "ftp:", "\\", "-", "&", "=",
        ];
        let bases = [
            "http://a.org/b/c?q",
            "https://X.y:8443/",
            "http://[::1]/p/",
            "http://u:p@h/d/e.html",
            "https://h.org",
            "not a url",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut some, mut none) = (0, 0);
        for _ in 0..60_000 {
            let len = next(9);
            let href: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            let base = bases[next(bases.len())];
            match resolve(base, &href) {
                Some(t) => {
                    some += 1;
                    assert_eq!(resolve(&t, &t).as_deref(), Some(t.as_str()), "{href:?} against {base:?} gave {t:?}");
                    assert_eq!(check_url_key(&t), Ok(()));
                    assert!(t.starts_with("http://") || t.starts_with("https://"), "{t:?}");
                }
                None => none += 1,
            }
        }
        assert!(some > 10_000 && none > 10_000, "both outcomes are exercised: {some} resolved, {none} not");
    }
}
