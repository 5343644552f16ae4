//! `sink-title`: a sink transform (world `percolator:sink/transform`, `wit/sink/sink.wit`) that
//! delivers pages' titles instead of their HTML.
//!
//! Of each batch it keeps the changes of one column (the sink's parameter `source`, default
//! `raw:html`) and maps each to a change of another column (`target`, default `page:title`) in
//! the same table and row, with the same commit timestamp: the text of the page's first
//! `<title>` element, entities `&amp; &lt; &gt; &quot; &#39;` decoded and white space
//! collapsed. A deleted page, or one without a title, becomes a deletion of the title. Every
//! other change is dropped. Deterministic and per-change, as the world requires.
//!
//! Build: `scripts/build-guests` (→ `target/guests/sink_title.wasm`); as a sink's
//! `transform = "sink_title.wasm"` with `[sink.params] target = "page:title"`.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/sink",
        world: "transform",
    });
}

use bindings::percolator::sink::types::Change;
use bindings::percolator::sink::{config, log};

/// The column read, unless the parameter `source` says otherwise.
pub const SOURCE: &str = "raw:html";
/// The column delivered, unless the parameter `target` says otherwise.
pub const TARGET: &str = "page:title";

struct SinkTitle;

impl bindings::Guest for SinkTitle {
    fn transform(batch: Vec<Change>) -> Result<Vec<Change>, String> {
        log_panics();
        let source = config::get("source").unwrap_or_else(|| SOURCE.to_owned());
        let target = config::get("target").unwrap_or_else(|| TARGET.to_owned());
        Ok(batch
            .into_iter()
            .filter(|c| c.column == source)
            .map(|c| Change {
                value: c
                    .value
                    .as_deref()
                    .and_then(|html| title(&String::from_utf8_lossy(html)))
                    .map(String::into_bytes),
                column: target.clone(),
                ..c
            })
            .collect())
    }
}

bindings::export!(SinkTitle with_types_in bindings);

/// A panic's message goes to the host through `log` before the panic aborts (the host puts it
/// in the batch's error; wasm32-unknown-unknown has no stderr).
fn log_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| log::log(log::Level::Error, &format!("transform panicked: {info}"))));
    });
}

/// The text of the first `<title>` element of `html` (tags matched without regard to case),
/// entities decoded, white space collapsed; none if there is none or it is empty.
pub fn title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let text = decode(&html[start..end]);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// The five entities a title usually carries; others are left as they are.
fn decode(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_title_decoded_and_collapsed() {
        assert_eq!(title("<html><head><TITLE lang=en>\n  Fish &amp; Chips\t</title>").as_deref(), Some("Fish & Chips"));
        assert_eq!(title("<title>a</title><title>b</title>").as_deref(), Some("a"));
        assert_eq!(title("<p>no title</p>"), None);
        assert_eq!(title("<title>  </title>"), None);
        assert_eq!(title("<title>unclosed"), None);
    }
}
