//! A deterministic sample-crawl generator: a small web of themed pages for demos and tests.
//!
//! [`generate`] builds, from a seed alone (its own splitmix64, no I/O), a web that exercises
//! every rule of `docs/webindex.md`:
//!
//! - about `pages / 25 + 2` hosts (`http://site3.example/`), pages such as
//!   `http://site3.example/a/page17.html`, every URL already normalized;
//! - titles and paragraphs drawn from a fixed vocabulary of real English words in a few topics
//!   (rust, databases, percolator, search, wasm, distributed systems), so queries hit;
//! - 2–8 links per page with anchor text: mostly to other generated pages (relative,
//!   root-relative and absolute hrefs, some with a `#fragment`), a few to uncrawled URLs, a few
//!   that the parser drops (`mailto:`, `#top`, `ftp:`, hrefs with a space), some repeated to one
//!   target with another anchor, some with an empty anchor, occasional self-links;
//! - about 15% exact duplicates (identical HTML under another URL: mirror hosts such as
//!   `http://mirror1.example/a/page17.html` or `/print/` copies), in clusters of 2–4, some with
//!   the same PageRank as their original so the URL tie-break decides the canonical;
//! - a skewed PageRank, a whole number of millionths (so `format!("{}", pr)` has at most six
//!   decimals and parses back to the same `f64`);
//! - about `pages / 3` re-crawls of existing URLs: pages that leave their cluster, pages that
//!   become a duplicate of another page, PageRank-only changes that flip a cluster's canonical,
//!   new links or re-targeted anchors (stale inverted links must disappear), and a few
//!   unchanged pages.
//!
//! [`generate_shaped`] with [`Shape::Hubs`] makes the link graph of documentation and news
//! sites instead: a few hub pages linked from most pages (a docs home, an API index, …), each
//! site's home page linked from most of its pages, and the other links drawn with a power-law
//! preference for a few popular pages — inlink counts from thousands down to none.
//!
//! [`Shape::Docs`] makes documentation sites shaped after a real crawl (page sizes from a few
//! hundred bytes to ~3 MB, a navigation block of hundreds of links on every page of some sites,
//! a third of the pages mirror copies): see the `docs` module below (its own generator).

use std::collections::{BTreeMap, BTreeSet};

/// One crawled page.
#[derive(Clone, Debug, PartialEq)]
pub struct CrawlPage {
    /// Normalized URL (the row key).
    pub url: String,
    /// The HTML.
    pub html: String,
    /// PageRank.
    pub pagerank: f64,
}

/// A crawl: first versions of every page, then re-crawls (later versions of some of them).
#[derive(Clone, Debug, PartialEq)]
pub struct Crawl {
    /// First crawl, one per URL.
    pub pages: Vec<CrawlPage>,
    /// Re-crawls, in order; each URL is one of `pages`' URLs.
    pub recrawls: Vec<CrawlPage>,
}

impl Crawl {
    /// The newest version of every URL as `raw:*` inputs of [`crate::batch::compute`]: URL →
    /// (`raw:html`, `raw:pagerank` as `format!("{}", pagerank)`).
    pub fn inputs(&self) -> crate::batch::Inputs {
        self.pages
            .iter()
            .chain(&self.recrawls)
            .map(|p| (p.url.clone(), (Some(p.html.clone().into_bytes()), Some(p.pagerank.to_string().into_bytes()))))
            .collect()
    }
}

/// The link graph of a generated crawl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    /// Links to pages drawn uniformly: every page has a few inlinks.
    #[default]
    Uniform,
    /// Hubs: [`HUBS`] pages linked from most pages (the first one from about 85% of them),
    /// each site's home page linked from 90% of the site's pages, and the other links drawn
    /// with a power-law preference for the first pages generated (the `k`-th of `n` with
    /// probability about `(k/n)^(-2/3)`, relative).
    Hubs,
    /// Documentation sites as a real crawl finds them: realistic HTML (head, navigation,
    /// breadcrumbs, code blocks, footer), page sizes with a median of about 4.5 KB, a 90th
    /// percentile of about 27 KB, a 99th of about 260 KB and a few pages up to ~3 MB; every
    /// page of a site carries the site's navigation block (hundreds of links on the largest
    /// site, whose targets are hubs linked from all of its pages); a third of the pages are
    /// byte-identical mirror copies of another page. Its own generator: `crawl/docs.rs`.
    Docs,
}

mod docs;

/// Global hubs of a [`Shape::Hubs`] crawl: its first pages, linked from 85%, 60%, 40% and 25%
/// of the pages.
pub const HUBS: usize = 4;

/// How often a page of a [`Shape::Hubs`] crawl links to each global hub, in percent.
const HUB_PERCENT: [usize; HUBS] = [85, 60, 40, 25];

/// Navigation anchors (links to hubs and home pages).
const NAV_ANCHORS: &[&str] = &["Home", "Documentation", "Docs home", "API reference", "User guide", "Index"];

/// Generates a crawl of `pages` pages from `seed` (same arguments, same crawl), of the
/// [`Shape::Uniform`] shape.
pub fn generate(seed: u64, pages: usize) -> Crawl {
    generate_shaped(seed, pages, Shape::Uniform)
}

/// Generates a crawl of `pages` pages of `shape` from `seed` (same arguments, same crawl).
pub fn generate_shaped(seed: u64, pages: usize, shape: Shape) -> Crawl {
    if shape == Shape::Docs {
        return docs::generate(seed, pages);
    }
    let mut g = Generator::new(seed, pages, shape);
    let first: Vec<CrawlPage> = (0..g.slots.len()).map(|i| g.page(i)).collect();
    let recrawls = (0..pages / 3).map(|_| g.recrawl()).collect();
    Crawl { pages: first, recrawls }
}

/// The first versions alone of [`generate_shaped`]'s pages (its `pages`, the same for the same
/// arguments), without its re-crawls: each re-crawl costs O(`pages`), so their `pages / 3`
/// make a crawl of 100,000 pages take many minutes. For callers that make their own.
pub fn generate_pages(seed: u64, pages: usize, shape: Shape) -> Vec<CrawlPage> {
    let g = Generator::new(seed, pages, shape);
    (0..g.slots.len()).map(|i| g.page(i)).collect()
}

/// splitmix64: tiny, fast, and good enough to make a web. Public so tests can shuffle and
/// choose deterministically with the same generator (the seed is the state: `Rng(seed)`).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent / 100`.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn word(&mut self, words: &[&'static str]) -> &'static str {
        words[self.below(words.len())]
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Topic vocabularies (words separated by spaces): a page is about one topic and borrows from
/// [`GENERAL`] and [`GLUE`].
const TOPICS: [&str; 6] = [
    "rust cargo crate borrow checker lifetime trait generic macro compiler ownership module closure \
     iterator async future unsafe clippy rustfmt enum struct pattern match vector slice string \
     reference mutable thread channel allocator panic result option crates workspace feature edition",
    "database table row column schema query index btree transaction commit rollback isolation \
     snapshot serializable lock latch journal recovery replica shard partition key value timestamp \
     version conflict write read scan storage mvcc anomaly skew durable atomic redb page cursor",
    "percolator bigtable tablet chubby oracle observer notification acknowledgment incremental \
     mapreduce batch pipeline crawler document duplicate canonical pagerank anchor link inlink \
     cluster hash fingerprint repository google caffeine latency throughput worker dirty primary \
     secondary prewrite cleanup",
    "web search engine crawl fetch url host robots sitemap html title term token stemming ranking \
     relevance inverted posting results snippet freshness spam mirror redirect domain protocol \
     browser hyperlink directory archive keyword query index portal",
    "webassembly wasm component sandbox runtime wasmtime module instance memory fuel epoch linker \
     host guest interface binding resource cranelift bytecode plugin isolation trap stack heap \
     import export wit validation compile reload limits capability",
    "consensus raft paxos leader follower quorum election heartbeat failure partition network gossip \
     membership replication consistency linearizable clock lease timeout retry idempotent \
     coordinator participant twophase spanner zookeeper failover datacenter outage availability \
     sharding rebalance",
];

/// Words any page may use.
const GENERAL: &str = "system design paper example performance benchmark measure fast slow large small \
    simple complex data model test bug fix release user developer team project guide tutorial chapter \
    section note question answer problem solution idea method approach tradeoff server client request \
    response operation update change history overview summary detail reason goal limit cost scale \
    million billion second minute daily weekly production research engineer library tool framework \
    language algorithm structure format file disk cache buffer process machine cluster service monitor \
    metric error warning";

/// Function words that make sentences read like sentences (the tokenizer drops some of them).
const GLUE: &str = "the a of and to in for with on is are by from that this when every each then also how \
    why what new old more most many few our";
/// Anchor texts that say nothing about the target.
const GENERIC_ANCHORS: &[&str] =
    &["read more", "next page", "home", "details", "see also", "continue reading", "source", "related", "more"];

const SECTIONS: &[&str] = &["a", "b", "docs", "blog", "news", "notes", "wiki"];
const FRAGMENTS: &[&str] = &["intro", "section-2", "comments", "summary", "footnote-1", "top"];
const COPY_DIRS: &[&str] = &["print", "archive", "amp"];
/// Duplicate clusters: extra copies of an original, 1–3 (cluster of 2–4), this often.
const COPY_PERCENT: usize = 9;
/// Fraction of duplicates that share their original's PageRank exactly.
const TIE_PERCENT: usize = 35;

/// A page's URL and where it came from.
struct Slot {
    url: String,
    /// `http://site3.example` (no trailing slash).
    origin: String,
    /// `/a/page17.html`, `/` for a host's home page.
    path: String,
    topic: usize,
}

/// One `<a href>` of a page.
#[derive(Clone)]
struct Anchor {
    href: String,
    text: String,
}

/// What a page says; rendered to HTML by [`Content::html`].
#[derive(Clone)]
struct Content {
    title: String,
    paragraphs: Vec<String>,
    links: Vec<Anchor>,
    style: bool,
    script: bool,
}

impl Content {
    fn html(&self) -> String {
        let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        h += &format!("<title>{}</title>\n", self.title);
        if self.style {
            h += "<style>body { font-family: serif; } .nav li { display: inline; }</style>\n";
        }
        h += "</head>\n<body>\n";
        h += &format!("<h1>{}</h1>\n", self.title);
        for p in &self.paragraphs {
            h += &format!("<p>{p}</p>\n");
        }
        h += "<ul class=\"nav\">\n";
        for a in &self.links {
            if a.text.is_empty() {
                h += &format!("  <li><a href=\"{}\"><img src=\"/img/icon.png\" alt=\"\"></a></li>\n", a.href);
            } else {
                h += &format!("  <li><a href=\"{}\">{}</a></li>\n", a.href, a.text);
            }
        }
        h += "</ul>\n";
        if self.script {
            h += "<script>var tracker = { hidden: \"invisible script words\" };</script>\n";
        }
        h += "</body>\n</html>\n";
        h
    }
}

/// [`TOPICS`], [`GENERAL`] and [`GLUE`] split into words.
struct Vocabulary {
    topics: Vec<Vec<&'static str>>,
    general: Vec<&'static str>,
    glue: Vec<&'static str>,
}

impl Vocabulary {
    fn new() -> Vocabulary {
        let words = |s: &'static str| s.split_whitespace().collect();
        Vocabulary { topics: TOPICS.iter().map(|t| words(t)).collect(), general: words(GENERAL), glue: words(GLUE) }
    }
}

struct Generator {
    rng: Rng,
    shape: Shape,
    /// The slot of each origin's home page (`/`).
    homes: BTreeMap<String, usize>,
    vocabulary: Vocabulary,
    slots: Vec<Slot>,
    /// Current content of every slot.
    content: Vec<Content>,
    /// Content identity: equal ids ⇔ the generator made them identical (a duplicate cluster).
    body: Vec<u64>,
    next_body: u64,
    /// Current PageRank in millionths.
    pagerank: Vec<u64>,
}

impl Generator {
    fn new(seed: u64, pages: usize, shape: Shape) -> Generator {
        let mut rng = Rng(seed ^ 0x5EED_C4A7_1DE0_0001);
        let hosts = pages / 25 + 2;
        let mut slots: Vec<Slot> = Vec::with_capacity(pages);
        let mut used = BTreeSet::new();
        let mut has_home = vec![false; hosts];
        // `copy_of[i]`: the original that slot `i` duplicates.
        let mut copy_of: Vec<Option<usize>> = Vec::with_capacity(pages);
        while slots.len() < pages {
            let i = slots.len();
            let h = rng.below(hosts);
            let origin = format!("http://site{h}.example");
            let path = if has_home[h] {
                format!("/{}/page{i}.html", rng.word(SECTIONS))
            } else {
                has_home[h] = true;
                "/".to_owned()
            };
            let url = format!("{origin}{path}");
            used.insert(url.clone());
            slots.push(Slot { url, origin, path, topic: rng.below(TOPICS.len()) });
            copy_of.push(None);
            if rng.chance(COPY_PERCENT) {
                let copies = rng.between(1, 3).min(pages - slots.len());
                let mut mirror = rng.between(1, 3);
                for _ in 0..copies {
                    let Some((origin, path)) = Self::copy_location(&mut rng, &slots[i], &mut mirror, &used) else {
                        continue;
                    };
                    let url = format!("{origin}{path}");
                    used.insert(url.clone());
                    slots.push(Slot { url, origin, path, topic: slots[i].topic });
                    copy_of.push(Some(i));
                }
            }
        }
        let homes =
            slots.iter().enumerate().filter(|(_, s)| s.path == "/").map(|(i, s)| (s.origin.clone(), i)).collect();
        let mut g = Generator {
            rng,
            shape,
            homes,
            vocabulary: Vocabulary::new(),
            content: Vec::with_capacity(slots.len()),
            body: Vec::with_capacity(slots.len()),
            pagerank: Vec::with_capacity(slots.len()),
            next_body: 0,
            slots,
        };
        // Titles and text first (anchors quote target titles), then links.
        for (i, copy) in copy_of.iter().enumerate() {
            let content = match *copy {
                Some(o) => g.content[o].clone(),
                None => {
                    let topic = g.slots[i].topic;
                    let title = g.title(topic);
                    let paragraphs = (0..g.rng.between(1, 4)).map(|_| g.paragraph(topic)).collect();
                    let (style, script) = (g.rng.chance(30), g.rng.chance(20));
                    Content { title, paragraphs, links: Vec::new(), style, script }
                }
            };
            g.content.push(content);
            let body = match *copy {
                Some(o) => g.body[o],
                None => g.fresh_body(),
            };
            g.body.push(body);
            let pagerank = match *copy {
                Some(o) if g.rng.chance(TIE_PERCENT) => g.pagerank[o],
                _ => g.draw_pagerank(),
            };
            g.pagerank.push(pagerank);
        }
        for (i, copy) in copy_of.iter().enumerate() {
            match *copy {
                Some(o) => g.content[i].links = g.content[o].links.clone(),
                None => g.content[i].links = g.links(i),
            }
        }
        g
    }

    /// Where a copy of `original` lives: the same path on a mirror host, or a `/print/`-like
    /// copy on the same host. `None` if every candidate is taken.
    fn copy_location(
        rng: &mut Rng,
        original: &Slot,
        mirror: &mut usize,
        used: &BTreeSet<String>,
    ) -> Option<(String, String)> {
        for _ in 0..8 {
            let (origin, path) = if rng.chance(70) {
                *mirror += 1;
                let origin = format!("http://mirror{}.example", *mirror % 4 + 1);
                // Home pages of different sites must not collide on one mirror.
                let path = match original.path.as_str() {
                    "/" => format!("/{}/", &original.origin["http://".len()..original.origin.len() - ".example".len()]),
                    p => p.to_owned(),
                };
                (origin, path)
            } else {
                let file = match original.path.rsplit_once('/') {
                    Some((_, f)) if !f.is_empty() => f.to_owned(),
                    _ => "index.html".to_owned(),
                };
                (original.origin.clone(), format!("/{}/{file}", rng.word(COPY_DIRS)))
            };
            if !used.contains(&format!("{origin}{path}")) {
                return Some((origin, path));
            }
        }
        None
    }

    fn fresh_body(&mut self) -> u64 {
        self.next_body += 1;
        self.next_body
    }

    /// A skewed PageRank in millionths: most pages near 0.15, a few up to about 25.
    fn draw_pagerank(&mut self) -> u64 {
        let u = self.rng.unit();
        150_000 + 1 + (u.powi(6) * 25_000_000.0) as u64
    }

    fn word(&mut self, topic: usize) -> &'static str {
        match self.rng.below(100) {
            0..65 => self.rng.word(&self.vocabulary.topics[topic]),
            65..80 => self.rng.word(&self.vocabulary.general),
            80..85 => {
                let other = self.rng.below(TOPICS.len());
                self.rng.word(&self.vocabulary.topics[other])
            }
            _ => self.rng.word(&self.vocabulary.glue),
        }
    }

    fn title(&mut self, topic: usize) -> String {
        let n = self.rng.between(2, 5);
        let words: Vec<String> = (0..n)
            .map(|_| {
                let w = if self.rng.chance(75) {
                    self.rng.word(&self.vocabulary.topics[topic])
                } else {
                    self.rng.word(&self.vocabulary.general)
                };
                capitalize(w)
            })
            .collect();
        words.join(" ")
    }

    fn sentence(&mut self, topic: usize) -> String {
        let n = self.rng.between(5, 14);
        let words: Vec<&str> = (0..n).map(|_| self.word(topic)).collect();
        let mut s = capitalize(words[0]);
        for w in &words[1..] {
            s.push(' ');
            s += w;
        }
        s.push('.');
        s
    }

    fn paragraph(&mut self, topic: usize) -> String {
        let n = self.rng.between(2, 5);
        let sentences: Vec<String> = (0..n).map(|_| self.sentence(topic)).collect();
        sentences.join(" ")
    }

    /// Anchor text for a link to slot `target`.
    fn anchor_text(&mut self, target: usize) -> String {
        match self.rng.below(100) {
            0..5 => String::new(),
            5..40 => self.content[target].title.clone(),
            40..80 => {
                let topic = self.slots[target].topic;
                let n = self.rng.between(1, 3);
                (0..n).map(|_| self.rng.word(&self.vocabulary.topics[topic])).collect::<Vec<_>>().join(" ")
            }
            _ => self.rng.word(GENERIC_ANCHORS).to_owned(),
        }
    }

    /// An href from slot `from` to slot `to`: relative, root-relative or absolute, sometimes
    /// with a fragment.
    fn href(&mut self, from: usize, to: usize) -> String {
        let (src, dst) = (&self.slots[from], &self.slots[to]);
        let mut href = if src.origin != dst.origin || self.rng.chance(25) {
            dst.url.clone()
        } else if self.rng.chance(40) {
            dst.path.clone()
        } else {
            relative(&src.path, &dst.path)
        };
        if self.rng.chance(12) {
            href.push('#');
            href += self.rng.word(FRAGMENTS);
        }
        href
    }

    /// A link target: any slot ([`Shape::Uniform`]), or one of the first slots far more often
    /// than the others ([`Shape::Hubs`]).
    fn target(&mut self) -> usize {
        let n = self.slots.len();
        match self.shape {
            Shape::Uniform => self.rng.below(n),
            // (A docs crawl has a generator of its own.)
            Shape::Hubs | Shape::Docs => ((self.rng.unit().powi(3) * n as f64) as usize).min(n - 1),
        }
    }

    /// The navigation links of slot `i` in a [`Shape::Hubs`] crawl: its site's home page and
    /// the global hubs, each with a probability.
    fn hub_links(&mut self, i: usize) -> Vec<Anchor> {
        let mut out = Vec::new();
        if self.shape != Shape::Hubs {
            return out;
        }
        let mut targets = Vec::new();
        if let Some(&home) = self.homes.get(&self.slots[i].origin)
            && self.rng.chance(90)
        {
            targets.push(home);
        }
        for (hub, percent) in HUB_PERCENT.into_iter().enumerate() {
            if hub < self.slots.len() && self.rng.chance(percent) {
                targets.push(hub);
            }
        }
        for t in targets.into_iter().filter(|&t| t != i) {
            let text =
                if self.rng.chance(35) { self.content[t].title.clone() } else { self.rng.word(NAV_ANCHORS).to_owned() };
            out.push(Anchor { href: self.href(i, t), text });
        }
        out
    }

    /// 2–8 links of slot `i` (after its navigation links, for [`Shape::Hubs`]).
    fn links(&mut self, i: usize) -> Vec<Anchor> {
        let mut links = self.hub_links(i);
        let n = links.len() + self.rng.between(2, 8);
        let mut targets: Vec<usize> = Vec::new();
        while links.len() < n {
            let link = match self.rng.below(100) {
                // Another anchor for a target linked already.
                roll @ 0..80 if roll < 12 && !targets.is_empty() => {
                    let t = *self.rng.pick(&targets);
                    Anchor { href: self.href(i, t), text: self.anchor_text(t) }
                }
                roll @ 0..80 => {
                    let t = if roll >= 75 { i } else { self.target() };
                    targets.push(t);
                    Anchor { href: self.href(i, t), text: self.anchor_text(t) }
                }
                // Uncrawled: another site, or a missing page of this one.
                80..87 => {
                    let word = self.rng.word(&self.vocabulary.general);
                    let href = if self.rng.chance(50) {
                        format!("http://external{}.example/{word}.html", self.rng.below(20))
                    } else {
                        format!("/missing/page{}.html", 1000 + self.rng.below(50))
                    };
                    Anchor { href, text: word.to_owned() }
                }
                // Dropped by the parser.
                87..91 => {
                    let host = &self.slots[i].origin["http://".len()..];
                    Anchor { href: format!("mailto:webmaster@{host}"), text: "contact".to_owned() }
                }
                91..95 => Anchor { href: "#top".to_owned(), text: "back to top".to_owned() },
                95..97 => {
                    let word = self.rng.word(&self.vocabulary.general);
                    Anchor { href: format!("ftp://files.example/pub/{word}.tar.gz"), text: "download".to_owned() }
                }
                _ => Anchor { href: "old draft.html".to_owned(), text: "draft".to_owned() },
            };
            links.push(link);
        }
        links
    }

    fn page(&self, i: usize) -> CrawlPage {
        CrawlPage {
            url: self.slots[i].url.clone(),
            html: self.content[i].html(),
            pagerank: self.pagerank[i] as f64 / 1_000_000.0,
        }
    }

    /// Duplicate clusters (2 or more slots with one body), as lists of slots.
    fn clusters(&self) -> Vec<Vec<usize>> {
        let mut by_body: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, b) in self.body.iter().enumerate() {
            by_body.entry(*b).or_default().push(i);
        }
        by_body.into_values().filter(|m| m.len() > 1).collect()
    }

    /// The canonical member of `members` (highest PageRank, then smallest URL).
    fn canonical(&self, members: &[usize]) -> usize {
        *members
            .iter()
            .min_by(|&&a, &&b| {
                self.pagerank[b].cmp(&self.pagerank[a]).then_with(|| self.slots[a].url.cmp(&self.slots[b].url))
            })
            .expect("clusters are not empty")
    }

    /// The next re-crawl: one existing URL, (a) leaving its cluster, (b) becoming a duplicate,
    /// (c) flipping its cluster's canonical, (d) with new links, or (e) unchanged.
    fn recrawl(&mut self) -> CrawlPage {
        let clusters = self.clusters();
        let roll = self.rng.below(100);
        // Without clusters, (a) and (c) become (b) and (d).
        let i = if roll < 20 && !clusters.is_empty() {
            self.leave_cluster(&clusters)
        } else if roll < 40 {
            self.become_duplicate()
        } else if roll < 60 && !clusters.is_empty() {
            self.flip_canonical(&clusters)
        } else if roll < 85 {
            self.change_links()
        } else {
            self.rng.below(self.slots.len())
        };
        self.page(i)
    }

    /// A member of a cluster gets new text and leaves it.
    fn leave_cluster(&mut self, clusters: &[Vec<usize>]) -> usize {
        let members = self.rng.pick(clusters);
        let i = *self.rng.pick(members);
        let topic = self.slots[i].topic;
        let k = self.rng.below(self.content[i].paragraphs.len());
        self.content[i].paragraphs[k] = self.paragraph(topic);
        self.body[i] = self.fresh_body();
        i
    }

    /// A page becomes an exact copy of another one (joins its cluster or forms one).
    fn become_duplicate(&mut self) -> usize {
        let n = self.slots.len();
        let (i, j) = (self.rng.below(n), self.rng.below(n));
        if self.body[i] != self.body[j] {
            self.content[i] = self.content[j].clone();
            self.body[i] = self.body[j];
            if self.rng.chance(TIE_PERCENT) {
                self.pagerank[i] = self.pagerank[j];
            }
        }
        i
    }

    /// Only the PageRank of a cluster member changes, so that the canonical flips: the
    /// canonical drops, or another member overtakes it or ties with it (then the smaller URL
    /// wins).
    fn flip_canonical(&mut self, clusters: &[Vec<usize>]) -> usize {
        let members = self.rng.pick(clusters);
        let canonical = self.canonical(members);
        let i = *self.rng.pick(members);
        self.pagerank[i] = if i == canonical {
            self.pagerank[i] / 2 + 1
        } else if self.rng.chance(30) {
            self.pagerank[canonical]
        } else {
            self.pagerank[canonical] + 1 + self.rng.below(500_000) as u64
        };
        i
    }

    /// A page's links change: re-targeted under the same anchors (the text is unchanged, so the
    /// page stays in its cluster) or a new list altogether; sometimes its PageRank too.
    fn change_links(&mut self) -> usize {
        let n = self.slots.len();
        let i = self.rng.below(n);
        if self.rng.chance(50) {
            let hrefs: Vec<String> = (0..self.content[i].links.len())
                .map(|_| {
                    let t = self.rng.below(n);
                    self.href(i, t)
                })
                .collect();
            for (link, href) in self.content[i].links.iter_mut().zip(hrefs) {
                link.href = href;
            }
        } else {
            self.content[i].links = self.links(i);
            self.body[i] = self.fresh_body();
        }
        if self.rng.chance(30) {
            self.pagerank[i] = self.draw_pagerank();
        }
        i
    }
}

/// A big documentation page of about `bytes` bytes (at least one section), deterministic in
/// `seed`: what a crawl of documentation sites holds at its top end (an API index, a long
/// reference chapter) and what the document processor must parse within its deadline
/// (`host-bench/src/bin/docproc.rs`).
///
/// Its shape is that of generated documentation (Sphinx, rustdoc): a `<head>` with an inline
/// `<style>` sheet and an inline `<script>` (with `<` and `"</div>"` inside), a sidebar of
/// nested navigation lists with a few hundred `<a>` links, then sections of nested `<div>`s
/// with headings and permalinks, paragraphs with inline `<code>`, `<em>`, links and entities
/// (`&amp; &lt; &gt; &quot; &#39; &nbsp; &#x2014;`, and `&mdash;`, which the parser keeps as
/// written), syntax-highlighted code blocks (a `<span>` per token), tables of links (an API
/// index), comments, and a footer script.
///
/// ```
/// let page = webindex::crawl::big_page(1, 100_000);
/// assert!(page.len() >= 100_000 && page.len() < 120_000);
/// assert_eq!(page, webindex::crawl::big_page(1, 100_000));
/// let doc = webindex::html::parse("http://docs.example/api/index.html", &page);
/// assert!(doc.links.len() > 300 && !doc.text.contains("function"));
/// ```
pub fn big_page(seed: u64, bytes: usize) -> String {
    let mut rng = Rng(seed ^ 0xB16_D0C5_0000_0001);
    let vocabulary = Vocabulary::new();
    let topic = rng.below(TOPICS.len());
    let topic = &vocabulary.topics[topic];
    let word = |rng: &mut Rng| -> &'static str {
        match rng.below(100) {
            0..60 => rng.word(topic),
            60..80 => rng.word(&vocabulary.general),
            _ => rng.word(&vocabulary.glue),
        }
    };
    // `lo..=hi` words.
    let words = |rng: &mut Rng, lo: usize, hi: usize| -> String {
        let n = rng.between(lo, hi);
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(word(rng));
        }
        s
    };
    let item = |rng: &mut Rng| format!("item{}", rng.below(5000));
    let title = capitalize(&words(&mut rng, 3, 3));
    let mut h = String::with_capacity(bytes + (16 << 10));
    h += "<!DOCTYPE html>\n<html lang=\"en\" data-content_root=\"../\">\n<head>\n<meta charset=\"utf-8\" />\n";
    h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1.0\" />\n";
    h += &format!("<title>{title} &mdash; Project 2.1 documentation</title>\n");
    h += "<link rel=\"stylesheet\" type=\"text/css\" href=\"../_static/pygments.css?v=4f649999\" />\n";
    h += "<link rel=\"index\" title=\"Index\" href=\"../genindex.html\" />\n<style>\n";
    for i in 0..120 {
        h += &format!(
            ".s{i} > .toctree-l{} a.reference, div.highlight .k{i} {{ color: #{:06x}; margin: {}px 0 0 {}em; }}\n",
            i % 4 + 1,
            rng.next_u64() & 0xff_ffff,
            rng.below(24),
            rng.below(4)
        );
    }
    h += "</style>\n<script>\nvar DOCUMENTATION_OPTIONS = { VERSION: '2.1', LANGUAGE: 'en', HAS_SOURCE: true };\n";
    for i in 0..60 {
        h += &format!(
            "function f{i}(el, n) {{ for (var k = 0; k < n && k < el.children.length; k++) {{ \
             if (el.children[k].id < \"s{}\") el.innerHTML += \"<div class='x'>\" + k + \"</div>\"; }} }}\n",
            rng.below(100)
        );
    }
    h += "</script>\n</head>\n<body>\n<div class=\"wy-grid-for-nav\">\n";
    h += "<nav data-toggle=\"wy-nav-shift\" class=\"wy-nav-side\" aria-label=\"Navigation menu\">\n";
    h += "<div class=\"wy-side-scroll\"><div role=\"search\"><form id=\"rtd-search-form\" class=\"wy-form\" \
          action=\"../search.html\" method=\"get\"><input type=\"text\" name=\"q\" placeholder=\"Search docs\" \
          aria-label=\"Search docs\" /></form></div>\n<div class=\"wy-menu wy-menu-vertical\">\n<ul class=\"current\">\n";
    for chapter in 0..24 {
        h += &format!(
            "<li class=\"toctree-l1\"><a class=\"reference internal\" href=\"../{}/index.html\">{}</a>\n<ul>\n",
            word(&mut rng),
            capitalize(&words(&mut rng, 2, 2))
        );
        for _ in 0..rng.between(8, 16) {
            let target = item(&mut rng);
            h += &format!(
                "<li class=\"toctree-l2\"><a class=\"reference internal\" href=\"../ch{chapter}/{target}.html\">{}</a></li>\n",
                capitalize(&words(&mut rng, 1, 4))
            );
        }
        h += "</ul>\n</li>\n";
    }
    h += "</ul>\n</div>\n</div>\n</nav>\n<section class=\"wy-nav-content-wrap\">\n<div class=\"wy-nav-content\">\n";
    h += "<div class=\"rst-content\"><div role=\"main\" class=\"document\" itemscope=\"itemscope\">\n";
    h += &format!(
        "<div itemprop=\"articleBody\">\n<section id=\"top\">\n<h1>{title}<a class=\"headerlink\" href=\"#top\" title=\"Link to this heading\">&para;</a></h1>\n"
    );
    let mut section = 0;
    while h.len() < bytes || section == 0 {
        section += 1;
        let heading = capitalize(&words(&mut rng, 2, 5));
        h += &format!(
            "<section id=\"section-{section}\">\n<h2>{heading}<a class=\"headerlink\" href=\"#section-{section}\" \
             title=\"Link to this heading\">&para;</a></h2>\n"
        );
        for _ in 0..rng.between(2, 5) {
            h += "<p>";
            for s in 0..rng.between(3, 8) {
                if s > 0 {
                    h += " ";
                }
                h += &capitalize(&words(&mut rng, 4, 14));
                match rng.below(10) {
                    0 => {
                        h += &format!(
                            " <code class=\"docutils literal notranslate\"><span class=\"pre\">{}::&lt;T&gt;</span></code>",
                            item(&mut rng)
                        )
                    }
                    1 => {
                        h += &format!(
                            " <a class=\"reference internal\" href=\"{}.html#method.{}\"><code class=\"xref\">{}</code></a>",
                            item(&mut rng),
                            word(&mut rng),
                            word(&mut rng)
                        )
                    }
                    2 => h += &format!(" <em>{}</em> &amp; <strong>{}</strong>", word(&mut rng), word(&mut rng)),
                    3 => {
                        h += &format!(
                            " (see&nbsp;<a href=\"https://en.wikipedia.org/wiki/{}\">{}</a>)",
                            capitalize(word(&mut rng)),
                            word(&mut rng)
                        )
                    }
                    4 => h += &format!(" &#x2014; &quot;{}&quot; isn&#39;t {}", word(&mut rng), word(&mut rng)),
                    5 => h += " &mdash; a &lt;b&gt; c",
                    _ => {}
                }
                h += ".";
            }
            h += "</p>\n";
        }
        match rng.below(4) {
            0 | 1 => {
                h += "<div class=\"highlight-rust notranslate\"><div class=\"highlight\"><pre><span></span>";
                for _ in 0..rng.between(6, 20) {
                    let (a, b) = (word(&mut rng), word(&mut rng));
                    h += &format!(
                        "<span class=\"k\">let</span><span class=\"w\"> </span><span class=\"n\">{a}</span>\
                         <span class=\"p\">:</span><span class=\"w\"> </span><span class=\"nb\">Vec</span>\
                         <span class=\"o\">&lt;</span><span class=\"n\">{b}</span><span class=\"o\">&gt;</span>\
                         <span class=\"w\"> </span><span class=\"o\">=</span><span class=\"w\"> </span>\
                         <span class=\"n\">{b}</span><span class=\"p\">.</span><span class=\"n\">iter</span>\
                         <span class=\"p\">().</span><span class=\"n\">collect</span><span class=\"p\">();</span>\
                         <span class=\"w\">  </span><span class=\"c1\">// {} &amp;&amp; {}</span>\n",
                        word(&mut rng),
                        word(&mut rng)
                    );
                }
                h += "</pre></div>\n</div>\n";
            }
            2 => {
                h += "<table class=\"docutils align-default\">\n<thead>\n<tr class=\"row-odd\"><th class=\"head\"><p>Item</p></th>\
                      <th class=\"head\"><p>Description</p></th></tr>\n</thead>\n<tbody>\n";
                for r in 0..rng.between(10, 40) {
                    let target = item(&mut rng);
                    h += &format!(
                        "<tr class=\"row-{}\"><td><p><a class=\"reference internal\" href=\"../api/{target}.html#{target}\" \
                         title=\"{target}\"><code class=\"xref py py-obj docutils literal\"><span class=\"pre\">{target}</span>\
                         </code></a></p></td>\n<td><p>{}</p></td>\n</tr>\n",
                        if r % 2 == 0 { "even" } else { "odd" },
                        capitalize(&words(&mut rng, 3, 10))
                    );
                }
                h += "</tbody>\n</table>\n";
            }
            _ => {
                h += &format!(
                    "<!-- generated from {}.rst: do not edit -->\n<div class=\"admonition note\">\n<p class=\"admonition-title\">Note</p>\n<p>{}</p>\n</div>\n",
                    item(&mut rng),
                    capitalize(&words(&mut rng, 20, 20))
                );
            }
        }
        h += "</section>\n";
    }
    h += "</section>\n</div>\n</div>\n<footer><div role=\"contentinfo\"><p>&#169; Copyright 2026, the authors.</p></div>\n";
    h += "<a href=\"../genindex.html\">Index</a> | <a href=\"../search.html\">Search</a></footer>\n</div>\n</div>\n</section>\n</div>\n";
    h += "<script>\n  jQuery(function () { SphinxRtdTheme.Navigation.enable(true); if (a < b && c > d) {} });\n</script>\n</body>\n</html>\n";
    h
}

/// `word` with its first letter upper-cased.
fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A relative reference from the page at `from` to `to` (both absolute paths, at most one
/// directory deep).
fn relative(from: &str, to: &str) -> String {
    let dir = &from[..=from.rfind('/').expect("paths start with /")];
    match to.strip_prefix(dir) {
        Some("") => "./".to_owned(),
        Some(rest) => rest.to_owned(),
        None if dir == "/" => to[1..].to_owned(),
        None => format!("..{to}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html;

    /// Pages grouped by identical HTML (the generator's duplicates).
    fn groups(pages: &[CrawlPage]) -> Vec<Vec<&CrawlPage>> {
        let mut by_html: BTreeMap<&str, Vec<&CrawlPage>> = BTreeMap::new();
        for p in pages {
            by_html.entry(&p.html).or_default().push(p);
        }
        by_html.into_values().filter(|g| g.len() > 1).collect()
    }

    #[test]
    fn deterministic() {
        assert_eq!(generate(7, 120), generate(7, 120));
        assert_ne!(generate(7, 120), generate(8, 120));
    }

    #[test]
    fn sizes_and_unique_urls() {
        for pages in [0, 1, 2, 10, 120, 500] {
            let crawl = generate(1, pages);
            assert_eq!(crawl.pages.len(), pages);
            assert_eq!(crawl.recrawls.len(), pages / 3);
            let urls: BTreeSet<&str> = crawl.pages.iter().map(|p| p.url.as_str()).collect();
            assert_eq!(urls.len(), pages, "URLs are unique");
            assert!(crawl.recrawls.iter().all(|r| urls.contains(r.url.as_str())), "re-crawls of crawled URLs");
            let hosts: BTreeSet<&str> = crawl
                .pages
                .iter()
                .filter(|p| p.url.contains("//site"))
                .map(|p| &p.url[..p.url.find(".example").unwrap()])
                .collect();
            assert!(hosts.len() <= pages / 25 + 2);
        }
    }

    #[test]
    fn duplicates_form_small_clusters_with_ties() {
        let mut tied = 0;
        for seed in 0..4 {
            let crawl = generate(seed, 200);
            let groups = groups(&crawl.pages);
            let duplicates: usize = groups.iter().map(|g| g.len() - 1).sum();
            assert!((10..=60).contains(&duplicates), "seed {seed}: {duplicates} duplicates of 200 pages");
            assert!(groups.iter().all(|g| (2..=4).contains(&g.len())));
            tied += groups
                .iter()
                .filter(|g| g.iter().any(|p| g.iter().any(|q| p.url != q.url && p.pagerank == q.pagerank)))
                .count();
        }
        assert!(tied > 0, "some duplicates share their PageRank");
    }

    #[test]
    fn pagerank_is_positive_and_prints_at_most_six_decimals() {
        let crawl = generate(3, 300);
        let all: Vec<f64> = crawl.pages.iter().chain(&crawl.recrawls).map(|p| p.pagerank).collect();
        for pr in &all {
            assert!(*pr > 0.0 && pr.is_finite());
            let text = pr.to_string();
            assert_eq!(text.parse::<f64>().unwrap(), *pr);
            assert!(text.split_once('.').is_none_or(|(_, d)| d.len() <= 6), "{text}");
        }
        let low = all.iter().filter(|p| **p < 1.0).count();
        assert!(low > all.len() / 2, "skewed: most pages have a small PageRank");
        assert!(all.iter().any(|p| *p > 5.0), "skewed: a few have a large one");
    }

    #[test]
    fn recrawls_change_pages_in_every_way() {
        let crawl = generate(5, 300);
        let mut current: BTreeMap<&str, &CrawlPage> = crawl.pages.iter().map(|p| (p.url.as_str(), p)).collect();
        let (mut unchanged, mut pagerank_only, mut html_changed, mut became_copy) = (0, 0, 0, 0);
        for r in &crawl.recrawls {
            let old = current[r.url.as_str()];
            match (old.html == r.html, old.pagerank == r.pagerank) {
                (true, true) => unchanged += 1,
                (true, false) => pagerank_only += 1,
                (false, _) => {
                    html_changed += 1;
                    if current.values().any(|p| p.url != r.url && p.html == r.html) {
                        became_copy += 1;
                    }
                }
            }
            current.insert(&r.url, r);
        }
        assert!(unchanged > 0 && pagerank_only > 0 && html_changed > 0 && became_copy > 0);
        let first = groups(&crawl.pages).len();
        let last: Vec<CrawlPage> = current.into_values().cloned().collect();
        assert!(first > 0 && !groups(&last).is_empty());
    }

    #[test]
    fn inputs_hold_the_newest_versions() {
        let crawl = generate(9, 60);
        let inputs = crawl.inputs();
        assert_eq!(inputs.len(), 60);
        let last = crawl.recrawls.last().unwrap();
        let (html, pr) = &inputs[&last.url];
        assert_eq!(html.as_deref(), Some(last.html.as_bytes()));
        assert_eq!(pr.as_deref(), Some(last.pagerank.to_string().as_bytes()));
    }

    /// Distinct sources linking to each target among `pages` (first versions).
    fn inlink_counts(pages: &[CrawlPage]) -> BTreeMap<String, usize> {
        let mut sources: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for p in pages {
            for link in html::parse(&p.url, &p.html).links {
                sources.entry(link.target).or_default().insert(&p.url);
            }
        }
        sources.into_iter().map(|(t, s)| (t, s.len())).collect()
    }

    #[test]
    fn hub_crawls_have_a_few_pages_linked_from_most_pages() {
        assert_eq!(generate_shaped(7, 300, Shape::Hubs), generate_shaped(7, 300, Shape::Hubs));
        assert_eq!(generate_shaped(7, 300, Shape::Uniform), generate(7, 300));
        let pages = 1000;
        let crawl = generate_shaped(5, pages, Shape::Hubs);
        assert_eq!(crawl.pages.len(), pages);
        let urls: BTreeSet<&str> = crawl.pages.iter().map(|p| p.url.as_str()).collect();
        let counts = inlink_counts(&crawl.pages);
        let mut crawled: Vec<usize> = urls.iter().map(|u| counts.get(*u).copied().unwrap_or(0)).collect();
        crawled.sort_unstable_by(|a, b| b.cmp(a));
        // The first hub is linked from most pages, the next ones from fewer; the median page
        // from very few: a power law, not the uniform crawl's few inlinks each.
        assert!(crawled[0] > pages * 7 / 10, "{:?}", &crawled[..10]);
        assert!(crawled[3] > pages / 5 && crawled[20] < pages / 5, "{:?}", &crawled[..25]);
        assert!(crawled[pages / 2] <= 3, "median {}", crawled[pages / 2]);
        let uniform = inlink_counts(&generate(5, pages).pages);
        assert!(uniform.values().all(|&n| n < pages / 10), "the uniform crawl has no hub");
    }

    #[test]
    fn generate_pages_is_the_first_versions_of_generate_shaped() {
        for shape in [Shape::Uniform, Shape::Hubs] {
            assert_eq!(generate_pages(4, 300, shape), generate_shaped(4, 300, shape).pages);
        }
    }

    #[test]
    fn relative_references() {
        assert_eq!(relative("/a/page1.html", "/a/page2.html"), "page2.html");
        assert_eq!(relative("/a/page1.html", "/b/page2.html"), "../b/page2.html");
        assert_eq!(relative("/a/page1.html", "/"), "../");
        assert_eq!(relative("/", "/b/page2.html"), "b/page2.html");
        assert_eq!(relative("/", "/"), "./");
        assert_eq!(relative("/site3/", "/site3/"), "./");
    }

    #[test]
    fn urls_are_normalized_and_links_mostly_reach_crawled_pages() {
        let crawl = generate(11, 200);
        let urls: BTreeSet<&str> = crawl.pages.iter().map(|p| p.url.as_str()).collect();
        for url in &urls {
            assert_eq!(html::resolve(url, url).as_deref(), Some(*url), "{url} is normalized");
        }
        let (mut crawled, mut total, mut dropped, mut hrefs) = (0, 0, 0, 0);
        for p in crawl.pages.iter().chain(&crawl.recrawls) {
            let doc = html::parse(&p.url, &p.html);
            assert!(!doc.title.is_empty() && !doc.text.is_empty());
            assert!(!doc.text.contains("invisible"), "script text is not visible: {}", p.url);
            total += doc.links.len();
            crawled += doc.links.iter().filter(|l| urls.contains(l.target.as_str())).count();
            hrefs += p.html.matches("<a href").count();
            dropped += p.html.matches("<a href").count() - doc.links.len();
        }
        assert!(crawled * 10 > total * 7, "{crawled} of {total} links reach crawled pages");
        assert!(crawled < total, "some links reach uncrawled pages");
        assert!(dropped > 0 && dropped * 5 < hrefs, "{dropped} of {hrefs} hrefs dropped");
    }
}
