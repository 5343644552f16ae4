//! HTML parsing: title, visible text, links with anchor text. (Skeleton: signatures fixed,
//! bodies being written.)

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

/// Parses `html` fetched from `base_url`.
pub fn parse(base_url: &str, html: &str) -> Document {
    let _ = (base_url, html);
    unimplemented!("skeleton")
}

/// Resolves `href` against `base` and normalizes it; `None` for fragments-only, non-http(s)
/// schemes and hrefs containing whitespace.
pub fn resolve(base: &str, href: &str) -> Option<String> {
    let _ = (base, href);
    unimplemented!("skeleton")
}
