//! [`Shape::Docs`](super::Shape::Docs): documentation sites as a crawler finds them, shaped
//! after a real crawl of 30,000 documentation pages (637 MB of HTML: median page 4.4 KB, 90th
//! percentile 27 KB, 99th 264 KB, largest 2.9 MB; hubs with about 6,700 inlinks; a third of
//! the pages byte-identical to another page).
//!
//! - **Sites** (`https://docs3.example`), about one per 150 original pages, of Zipf sizes (the
//!   first site holds a sixth to a quarter of the original pages): a home page `/`, 2–6 section indexes
//!   (`/guide/`), and articles (`/guide/lifetime-17.html`); 8% of the articles are redirect
//!   stubs (`<meta http-equiv="refresh">`, a few hundred bytes); 30% of the other sites are
//!   hand-written (a bare head, a line of links, no scripts).
//! - **A navigation block shared by every page of a site**, byte for byte (root-relative
//!   hrefs): a sidebar of 150–250 links on the first site and on a tenth of the sites of 300
//!   pages or more, a bar of 6–20 links elsewhere. Its targets are the site's hubs: each is
//!   linked from every page of the site (thousands of inlinks in a crawl of 30,000 pages).
//! - **Realistic HTML**: a head with meta tags, a stylesheet, inline CSS and scripts; a header
//!   with the logo and the sections; breadcrumbs; a body of headings, paragraphs with inline
//!   code and cross-references (mostly within the site, some to other sites' pages with a
//!   preference for the first ones, a few to uncrawled hosts), syntax-highlighted code blocks
//!   (`<pre><code>` with spans and entities), lists, tables and notes; a footer. Section
//!   indexes and home pages list their articles.
//! - **Sizes**: each original page is filled to a size drawn from [`SIZE_KNOTS`] (or the size
//!   of its template and a short body, if that is more), so that over the whole crawl the
//!   median is about 4.5 KB, the 90th percentile about 27 KB, the 99th about 260 KB, and the
//!   largest pages reach ~3 MB.
//! - **Copies**: a third of the pages (`pages / 3`) are mirrors (`https://mirror2.example`,
//!   the same paths): byte-identical copies of every page of a site (the last mirror
//!   partial). Sites with a sidebar, which makes their pages large, are not mirrored (unless
//!   there is no other), so that copies keep the size distribution.
//! - `pages / 3` **re-crawls**: an edited article (its mirrors now differ from it), a mirror
//!   brought back in line with its original, a PageRank change alone, or an unchanged page.
//!
//! The first page of the crawl is the first site's home (linked from every page of the site);
//! the others follow in a shuffled order, as a crawler's frontier would deliver them.

use super::{Crawl, CrawlPage, Rng, TOPICS, Vocabulary, capitalize, relative};

/// The distribution of a page's HTML size: (quantile, bytes) knots, interpolated
/// log-linearly. Below the measured quantiles (4.4 KB, 27 KB, 264 KB, 2.9 MB) where a page's
/// template (the navigation above all) makes pages larger than drawn.
const SIZE_KNOTS: [(f64, f64); 7] = [
    (0.0, 500.0),
    (0.2, 1_500.0),
    (0.5, 2_400.0),
    (0.9, 25_000.0),
    (0.99, 250_000.0),
    (0.999, 900_000.0),
    (1.0, 2_950_000.0),
];

/// Original pages per site (roughly: sites are of Zipf sizes).
const PAGES_PER_SITE: usize = 150;
/// The exponent of the sites' Zipf sizes: the first of 15 sites holds about a quarter of the
/// original pages.
const SITE_ZIPF: f64 = 0.8;
/// Sites of 300 pages or more (but the first) with a sidebar of hundreds of links, in percent.
const SIDEBAR_PERCENT: usize = 10;
/// Sites (but the first) of hand-written pages, in percent.
const PLAIN_PERCENT: usize = 30;
/// Articles that are redirect stubs, in percent.
const REDIRECT_PERCENT: usize = 8;
const SECTIONS: &[&str] =
    &["guide", "reference", "api", "tutorial", "howto", "faq", "internals", "examples", "changelog", "cookbook"];
const NOTE_KINDS: &[&str] = &["Note", "Warning", "Tip", "See also"];
const CODE_KEYWORDS: &[&str] = &["fn", "let", "mut", "pub", "impl", "struct", "enum", "match", "for", "return", "use"];
const CODE_TYPES: &[&str] = &["String", "Vec", "Option", "Result", "HashMap", "Arc", "Mutex", "u64", "usize", "bool"];

/// What a page of a site is.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Home,
    /// The index of the site's section `s`.
    Section(usize),
    /// An article of section `s`.
    Article(usize),
    /// A redirect stub to the site's page (an index into [`Docs::pages`]).
    Redirect(usize),
}

/// An original page.
struct Page {
    site: usize,
    /// `/`, `/guide/`, `/guide/lifetime-17.html`.
    path: String,
    kind: Kind,
    title: String,
    /// The size to fill the page to (bytes of HTML).
    size: usize,
    /// Incremented by each edit (a re-crawl); the page's text is drawn from its version.
    version: u64,
}

struct Site {
    origin: String,
    name: String,
    topic: usize,
    sections: Vec<&'static str>,
    /// The site's pages (indexes into [`Docs::pages`]), home first, then section indexes.
    pages: Vec<usize>,
    /// Articles of each section.
    articles: Vec<Vec<usize>>,
    /// The navigation block: the same bytes on every page of the site.
    nav: String,
    /// The head's inline style, the site's own.
    style: String,
    /// Hand-written pages: a bare head, a line of links for navigation, no scripts.
    plain: bool,
    /// Whether the navigation block is a sidebar of hundreds of links.
    sidebar: bool,
}

/// A page of the crawl: an original or a mirror's copy of one.
struct Slot {
    url: String,
    /// The original page (index into [`Docs::pages`]), for copies and originals alike.
    page: usize,
    copy: bool,
    /// The version of the original page that `html` is.
    version: u64,
    html: String,
    /// PageRank in millionths.
    pagerank: u64,
}

struct Docs {
    seed: u64,
    rng: Rng,
    vocabulary: Vocabulary,
    sites: Vec<Site>,
    pages: Vec<Page>,
    slots: Vec<Slot>,
    /// The slot of each original page.
    slot_of: Vec<usize>,
}

/// A [`Shape::Docs`](super::Shape::Docs) crawl of `pages` pages from `seed`.
pub(super) fn generate(seed: u64, pages: usize) -> Crawl {
    if pages == 0 {
        return Crawl { pages: Vec::new(), recrawls: Vec::new() };
    }
    let mut d = Docs::new(seed, pages);
    let first = (0..d.slots.len()).map(|s| d.out(s)).collect();
    let recrawls = (0..pages / 3).map(|_| d.recrawl()).collect();
    Crawl { pages: first, recrawls }
}

fn pr(millionths: u64) -> f64 {
    millionths as f64 / 1_000_000.0
}

/// The size at quantile `u` of [`SIZE_KNOTS`].
fn size_at(u: f64) -> usize {
    let k = SIZE_KNOTS.iter().position(|&(q, _)| q >= u).unwrap_or(SIZE_KNOTS.len() - 1).max(1);
    let ((q0, s0), (q1, s1)) = (SIZE_KNOTS[k - 1], SIZE_KNOTS[k]);
    let t = ((u - q0) / (q1 - q0)).clamp(0.0, 1.0);
    (s0.ln() + t * (s1.ln() - s0.ln())).exp() as usize
}

impl Docs {
    fn new(seed: u64, total: usize) -> Docs {
        let rng = Rng(seed ^ 0xD0C5_5173_0000_0003);
        let copies = total / 3;
        let originals = total - copies;
        let site_count = (originals / PAGES_PER_SITE + 2).min(originals);
        // Zipf sizes (the `k`-th site's share proportional to `k^-0.8`), at least one page
        // each; the rounding's remainder to the first site.
        let weight = |k: usize| (k as f64).powf(-SITE_ZIPF);
        let harmonic: f64 = (1..=site_count).map(weight).sum();
        let mut sizes: Vec<usize> =
            (1..=site_count).map(|k| ((originals as f64 * weight(k) / harmonic) as usize).max(1)).collect();
        while sizes.iter().sum::<usize>() > originals {
            let largest = (0..site_count).max_by_key(|&k| sizes[k]).expect("a site");
            sizes[largest] -= 1;
        }
        sizes[0] += originals - sizes.iter().sum::<usize>();
        let mut d = Docs {
            seed,
            rng,
            vocabulary: Vocabulary::new(),
            sites: Vec::new(),
            pages: Vec::new(),
            slots: Vec::new(),
            slot_of: Vec::new(),
        };
        for (k, &size) in sizes.iter().enumerate() {
            d.add_site(k, size);
        }
        for k in 0..d.sites.len() {
            d.sites[k].nav = d.nav(k);
        }
        // Originals, rendered; then the mirrors.
        for i in 0..d.pages.len() {
            let url = format!("{}{}", d.sites[d.pages[i].site].origin, d.pages[i].path);
            let pagerank = match d.pages[i].kind {
                Kind::Home => 2_000_000 + d.rng.below(20_000_000) as u64,
                Kind::Section(_) => 500_000 + d.rng.below(2_500_000) as u64,
                _ => d.draw_pagerank(),
            };
            let html = d.render(i);
            d.slot_of.push(d.slots.len());
            d.slots.push(Slot { url, page: i, copy: false, version: 0, html, pagerank });
        }
        let mut mirror = 0;
        // Sites with a sidebar make large pages: mirrors of them would skew the sizes.
        let mut mirrored: Vec<usize> = (0..d.sites.len()).filter(|&k| !d.sites[k].sidebar).collect();
        if mirrored.is_empty() {
            mirrored.push(0);
        }
        while d.slots.len() < total {
            mirror += 1;
            let site = *d.rng.pick(&mirrored);
            let origin = format!("https://mirror{mirror}.example");
            let take = d.sites[site].pages.len().min(total - d.slots.len());
            for n in 0..take {
                let page = d.sites[site].pages[n];
                let original = d.slot_of[page];
                let pagerank = if d.rng.chance(20) { d.slots[original].pagerank } else { d.draw_pagerank() / 2 + 1 };
                let (url, html) = (format!("{origin}{}", d.pages[page].path), d.slots[original].html.clone());
                d.slots.push(Slot { url, page, copy: true, version: 0, html, pagerank });
            }
        }
        // The first site's home (page 0, slot 0) first, the others shuffled.
        for i in (2..d.slots.len()).rev() {
            let j = 1 + d.rng.below(i);
            d.slots.swap(i, j);
        }
        for (s, slot) in d.slots.iter().enumerate() {
            if !slot.copy {
                d.slot_of[slot.page] = s;
            }
        }
        d
    }

    /// Adds site `k` of `size` original pages.
    fn add_site(&mut self, k: usize, size: usize) {
        let rng = &mut self.rng;
        let topic = rng.below(TOPICS.len());
        let mut sections: Vec<&'static str> = Vec::new();
        let wanted = rng.between(2, 6).min(size.saturating_sub(1));
        while sections.len() < wanted {
            let s = *rng.pick(SECTIONS);
            if !sections.contains(&s) {
                sections.push(s);
            }
        }
        let name = format!(
            "{} {}",
            capitalize(rng.word(&self.vocabulary.topics[topic])),
            capitalize(rng.word(&["docs", "book", "handbook", "manual", "reference"]))
        );
        let style = {
            let color = rng.below(0x1000000);
            let mut css = format!(
                ":root {{ --accent: #{color:06x}; --sidebar-width: {}px; }}\nbody {{ margin: 0; font: 16px/1.6 system-ui, sans-serif; }}\n",
                200 + rng.below(120)
            );
            for _ in 0..rng.between(2, 8) {
                let class = rng.word(&self.vocabulary.general);
                css += &format!(
                    ".{class} {{ padding: {}px {}px; border-left: {}px solid var(--accent); }}\n",
                    rng.below(24),
                    rng.below(24),
                    rng.below(5)
                );
            }
            css
        };
        let site = self.sites.len();
        let first = self.pages.len();
        let mut articles = vec![Vec::new(); sections.len()];
        self.pages.push(Page { site, path: "/".into(), kind: Kind::Home, title: name.clone(), size: 0, version: 0 });
        for (s, section) in sections.iter().enumerate() {
            self.pages.push(Page {
                site,
                path: format!("/{section}/"),
                kind: Kind::Section(s),
                title: capitalize(section),
                size: 0,
                version: 0,
            });
        }
        for _ in 0..size - 1 - sections.len() {
            let i = self.pages.len();
            let s = self.rng.below(sections.len().max(1));
            let title = self.title(topic);
            let slug = title.split(' ').take(2).map(str::to_lowercase).collect::<Vec<_>>().join("-");
            let section = sections.get(s).copied().unwrap_or("pages");
            let kind = if i > first + sections.len() + 1 && self.rng.chance(REDIRECT_PERCENT) {
                // To an earlier article of the site.
                Kind::Redirect(first + sections.len() + 1 + self.rng.below(i - first - sections.len() - 1))
            } else {
                if let Some(list) = articles.get_mut(s) {
                    list.push(i);
                }
                Kind::Article(s)
            };
            self.pages.push(Page {
                site,
                path: format!("/{section}/{slug}-{i}.html"),
                kind,
                title,
                size: 0,
                version: 0,
            });
        }
        for page in &mut self.pages[first..] {
            page.size = size_at(self.rng.unit());
        }
        self.sites.push(Site {
            origin: format!("https://docs{k}.example"),
            name,
            topic,
            sections,
            pages: (first..self.pages.len()).collect(),
            articles,
            nav: String::new(),
            style,
            plain: k > 0 && self.rng.chance(PLAIN_PERCENT),
            sidebar: false,
        });
    }

    /// Site `k`'s navigation block: a sidebar of hundreds of its pages, or a short top bar.
    fn nav(&mut self, k: usize) -> String {
        let site = &self.sites[k];
        if site.plain {
            let mut h = String::from("<p class=\"nav\"><a href=\"/\">Home</a>");
            for s in &site.sections {
                h += &format!(" | <a href=\"/{s}/\">{}</a>", capitalize(s));
            }
            return h + "</p>\n<hr>\n";
        }
        let sidebar = k == 0 || (site.pages.len() >= 300 && self.rng.chance(SIDEBAR_PERCENT));
        self.sites[k].sidebar = sidebar;
        let site = &self.sites[k];
        let wanted = if sidebar { self.rng.between(150, 250) } else { self.rng.between(6, 20) };
        let mut h =
            format!("<nav class=\"{}\" aria-label=\"Site\">\n<ul>\n", if sidebar { "sidebar" } else { "topics" });
        for &i in site.pages.iter().filter(|&&i| !matches!(self.pages[i].kind, Kind::Redirect(_))).take(wanted) {
            let p = &self.pages[i];
            if sidebar {
                // A documentation generator's table of contents: classed entries, by level.
                let level = if matches!(p.kind, Kind::Article(_)) { 2 } else { 1 };
                h += &format!("<li class=\"toctree-l{level}\"><a href=\"{}\">{}</a></li>\n", p.path, p.title);
            } else {
                h += &format!("<li><a href=\"{}\">{}</a></li>\n", p.path, p.title);
            }
        }
        h += "</ul>\n</nav>\n";
        h
    }

    /// A skewed PageRank in millionths (as the other shapes': most near 0.15, a few up to 25).
    fn draw_pagerank(&mut self) -> u64 {
        let u = self.rng.unit();
        150_000 + 1 + (u.powi(6) * 25_000_000.0) as u64
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

    /// Page `i`'s HTML at its current version.
    fn render(&self, i: usize) -> String {
        let page = &self.pages[i];
        let mut rng = Rng(self.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (page.version << 40));
        let site = &self.sites[page.site];
        if let Kind::Redirect(to) = page.kind {
            let href = relative(&page.path, &self.pages[to].path);
            return format!(
                "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Redirecting…</title>\n\
                 <meta http-equiv=\"refresh\" content=\"0; url={href}\">\n<link rel=\"canonical\" href=\"{}{}\">\n</head>\n\
                 <body>\n<p>Redirecting to <a href=\"{href}\">{}</a>…</p>\n</body>\n</html>\n",
                site.origin, self.pages[to].path, self.pages[to].title
            );
        }
        let mut w = Writer { docs: self, rng: &mut rng, page: i, topic: site.topic, h: String::new() };
        w.head();
        let footer = w.footer();
        match page.kind {
            Kind::Home => {
                w.paragraph();
                for s in 0..site.sections.len() {
                    w.index(s, 12);
                }
            }
            Kind::Section(s) => {
                w.paragraph();
                w.index(s, usize::MAX);
            }
            _ => {}
        }
        while w.h.len() + footer.len() + "</main>\n".len() < page.size {
            w.block();
        }
        w.h += "</main>\n";
        w.h += &footer;
        w.h
    }

    /// The next re-crawl.
    fn recrawl(&mut self) -> CrawlPage {
        let n = self.slots.len();
        let roll = self.rng.below(100);
        let s = self.rng.below(n);
        let page = self.slots[s].page;
        if roll < 45 {
            // An edit of an article: its copies no longer match it.
            let s = self.slot_of[page];
            if matches!(self.pages[page].kind, Kind::Article(_)) {
                self.pages[page].version += 1;
                self.slots[s].html = self.render(page);
                self.slots[s].version = self.pages[page].version;
            }
            self.out(s)
        } else if roll < 65 {
            // A mirror catches up with its original (one that is behind, if any).
            let behind: Vec<usize> = (0..n)
                .filter(|&c| self.slots[c].copy && self.slots[c].version != self.pages[self.slots[c].page].version)
                .collect();
            let s = if behind.is_empty() { s } else { *self.rng.pick(&behind) };
            let page = self.slots[s].page;
            if self.slots[s].copy {
                self.slots[s].html = self.slots[self.slot_of[page]].html.clone();
                self.slots[s].version = self.pages[page].version;
            }
            self.out(s)
        } else if roll < 85 {
            self.slots[s].pagerank = self.draw_pagerank();
            self.out(s)
        } else {
            self.out(s)
        }
    }

    fn out(&self, s: usize) -> CrawlPage {
        let slot = &self.slots[s];
        CrawlPage { url: slot.url.clone(), html: slot.html.clone(), pagerank: pr(slot.pagerank) }
    }
}

/// Renders one page's HTML.
struct Writer<'a> {
    docs: &'a Docs,
    rng: &'a mut Rng,
    page: usize,
    topic: usize,
    h: String,
}

impl<'a> Writer<'a> {
    fn page(&self) -> &'a Page {
        let docs: &'a Docs = self.docs;
        &docs.pages[self.page]
    }

    fn site(&self) -> &'a Site {
        let docs: &'a Docs = self.docs;
        &docs.sites[self.page().site]
    }

    fn word(&mut self) -> &'static str {
        let v = &self.docs.vocabulary;
        match self.rng.below(100) {
            0..60 => self.rng.word(&v.topics[self.topic]),
            60..78 => self.rng.word(&v.general),
            78..82 => {
                let other = self.rng.below(TOPICS.len());
                self.rng.word(&v.topics[other])
            }
            _ => self.rng.word(&v.glue),
        }
    }

    fn sentence(&mut self) -> String {
        let n = self.rng.between(6, 18);
        let mut s = capitalize(self.word());
        for k in 1..n {
            s.push(' ');
            if k == n / 2 && self.rng.chance(10) {
                s += "— ";
            }
            if self.rng.chance(6) {
                s += &format!("<code>{}</code>", self.word());
            } else {
                s += self.word();
            }
        }
        s.push('.');
        s
    }

    /// The `<head>`, the header, the navigation and the breadcrumbs.
    fn head(&mut self) {
        let (page, site) = (self.page(), self.site());
        let (title, name, path, origin) = (&page.title, &site.name, &page.path, &site.origin);
        let description = self.sentence().replace("<code>", "").replace("</code>", "");
        let mut h = String::with_capacity(page_capacity(page.size));
        if site.plain {
            h += &format!(
                "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
                 <link rel=\"stylesheet\" href=\"/style.css\">\n</head>\n<body>\n{}<h1>{title}</h1>\n",
                site.nav
            );
            self.h = h;
            return;
        }
        h += "<!DOCTYPE html>\n<html lang=\"en\" data-content_root=\"../\">\n<head>\n<meta charset=\"utf-8\">\n";
        h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
        h += &format!(
            "<meta name=\"description\" content=\"{description}\">\n<meta name=\"generator\" content=\"docgen 4.2.1\">\n"
        );
        h += &format!("<title>{title} — {name}</title>\n<link rel=\"canonical\" href=\"{origin}{path}\">\n");
        h += "<link rel=\"stylesheet\" href=\"/_static/theme.css?v=4f2a91c3\">\n<link rel=\"icon\" href=\"/_static/favicon.png\">\n";
        h += &format!("<style>\n{}</style>\n", site.style);
        h += "<script src=\"/_static/documentation_options.js?v=5929fcd5\"></script>\n<script src=\"/_static/searchtools.js\" defer></script>\n";
        h += &format!(
            "<script>window.DOCS = {{ root: \"{origin}\", page: \"{path}\", theme: \"auto\", hidden: \"invisible script words\" }};</script>\n"
        );
        h += "</head>\n<body>\n<header class=\"top\">\n";
        h += &format!(
            "<a class=\"logo\" href=\"/\"><img src=\"/_static/logo.svg\" alt=\"\"> {name}</a>\n<ul class=\"sections\">\n"
        );
        for s in &site.sections {
            h += &format!("<li><a href=\"/{s}/\">{}</a></li>\n", capitalize(s));
        }
        h += "</ul>\n<form class=\"search\" action=\"/search.html\" method=\"get\"><input type=\"text\" name=\"q\" placeholder=\"Search\"></form>\n</header>\n";
        h += &site.nav;
        h += "<main>\n<div class=\"breadcrumbs\"><a href=\"/\">Home</a>";
        match page.kind {
            Kind::Article(s) => {
                let section = site.sections[s];
                h += &format!(" » <a href=\"/{section}/\">{}</a> » {title}", capitalize(section));
            }
            Kind::Section(_) => h += &format!(" » {title}"),
            _ => {}
        }
        h += &format!(
            "</div>\n<h1>{title}<a class=\"headerlink\" href=\"#\" title=\"Link to this heading\">¶</a></h1>\n"
        );
        self.h = h;
    }

    fn footer(&mut self) -> String {
        let site = self.site();
        if site.plain {
            return format!("<hr>\n<address>{} — <a href=\"/\">home</a></address>\n</body>\n</html>\n", site.name);
        }
        format!(
            "<footer>\n<p>© 2026, the {} authors. Built with docgen 4.2.1.</p>\n\
             <p><a href=\"https://github.example/{}/edit/main/docs{}\">Edit this page</a> · \
             <a href=\"/genindex.html\">Index</a></p>\n</footer>\n</body>\n</html>\n",
            site.name,
            &site.origin["https://".len()..],
            self.page().path
        )
    }

    /// A list of section `s`'s articles (at most `max`).
    fn index(&mut self, s: usize, max: usize) {
        let site = self.site();
        let Some(section) = site.sections.get(s) else { return };
        self.h += &format!("<h2 id=\"{section}\">{}</h2>\n<ul class=\"index\">\n", capitalize(section));
        for &a in site.articles[s].iter().take(max) {
            let p = &self.docs.pages[a];
            let href = relative(&self.page().path, &p.path);
            self.h += &format!("<li><a href=\"{href}\">{}</a></li>\n", p.title);
        }
        self.h += "</ul>\n";
    }

    /// A link: mostly to a page of this site, sometimes to another site's (the first sites'
    /// first pages more often), a few to uncrawled hosts or this page's headings.
    fn link(&mut self) -> String {
        let docs = self.docs;
        let roll = self.rng.below(100);
        if roll < 4 {
            let word = self.word();
            return format!("<a href=\"https://crates.example/{word}\">{word}</a>");
        }
        if roll < 8 {
            return format!("<a href=\"#{}\">{}</a>", self.word(), self.word());
        }
        let (target, absolute) = if roll < 78 {
            let pages = &self.site().pages;
            (pages[self.rng.below(pages.len())], false)
        } else {
            let k = ((self.rng.unit().powi(2) * docs.sites.len() as f64) as usize).min(docs.sites.len() - 1);
            let pages = &docs.sites[k].pages;
            let t = ((self.rng.unit().powi(3) * pages.len() as f64) as usize).min(pages.len() - 1);
            (pages[t], k != self.page().site)
        };
        let p = &docs.pages[target];
        let href = if absolute {
            format!("{}{}", docs.sites[p.site].origin, p.path)
        } else if self.rng.chance(30) {
            p.path.clone()
        } else {
            relative(&self.page().path, &p.path)
        };
        let text = if self.rng.chance(60) { p.title.clone() } else { self.word().to_owned() };
        format!("<a class=\"reference\" href=\"{href}\">{text}</a>")
    }

    fn paragraph(&mut self) {
        self.h += "<p>";
        for k in 0..self.rng.between(2, 6) {
            if k > 0 {
                self.h.push(' ');
            }
            let s = self.sentence();
            self.h += &s;
            if self.rng.chance(45) {
                let l = self.link();
                self.h.push(' ');
                self.h += &l;
                self.h.push('.');
            }
        }
        self.h += "</p>\n";
    }

    /// One block of an article's body.
    fn block(&mut self) {
        match self.rng.below(100) {
            0..45 => self.paragraph(),
            45..55 => {
                let words: Vec<&str> = (0..self.rng.between(1, 4)).map(|_| self.word()).collect();
                let id = words.join("-");
                let text = capitalize(&words.join(" "));
                self.h += &format!("<h2 id=\"{id}\">{text}<a class=\"headerlink\" href=\"#{id}\">¶</a></h2>\n");
            }
            55..75 => self.code(),
            75..85 => {
                self.h += "<ul>\n";
                for _ in 0..self.rng.between(3, 8) {
                    let s = self.sentence();
                    let l = if self.rng.chance(40) { format!(" {}", self.link()) } else { String::new() };
                    self.h += &format!("<li>{s}{l}</li>\n");
                }
                self.h += "</ul>\n";
            }
            85..93 => {
                let cols = self.rng.between(2, 4);
                self.h += "<table class=\"docutils\">\n<thead><tr>";
                for _ in 0..cols {
                    let w = capitalize(self.word());
                    self.h += &format!("<th>{w}</th>");
                }
                self.h += "</tr></thead>\n<tbody>\n";
                for _ in 0..self.rng.between(3, 12) {
                    self.h += "<tr>";
                    for c in 0..cols {
                        let cell =
                            if c == 0 { format!("<code>{}</code>", self.word()) } else { self.word().to_owned() };
                        self.h += &format!("<td>{cell}</td>");
                    }
                    self.h += "</tr>\n";
                }
                self.h += "</tbody>\n</table>\n";
            }
            _ => {
                let kind = *self.rng.pick(NOTE_KINDS);
                let s = self.sentence();
                let l = self.link();
                self.h += &format!(
                    "<div class=\"admonition {}\">\n<p class=\"admonition-title\">{kind}</p>\n<p>{s} {l}</p>\n</div>\n",
                    kind.to_lowercase().replace(' ', "-")
                );
            }
        }
    }

    /// A syntax-highlighted code block.
    fn code(&mut self) {
        self.h += "<div class=\"highlight\"><pre><code class=\"language-rust\">";
        for _ in 0..self.rng.between(3, 24) {
            let indent = "    ".repeat(self.rng.below(3));
            let keyword = *self.rng.pick(CODE_KEYWORDS);
            let (name, arg) = (self.word(), self.word());
            let ty = *self.rng.pick(CODE_TYPES);
            self.h += &format!(
                "{indent}<span class=\"k\">{keyword}</span> <span class=\"n\">{name}</span>(<span class=\"n\">{arg}</span>: &amp;<span class=\"kt\">{ty}</span>&lt;<span class=\"kt\">u8</span>&gt;) -&gt; <span class=\"n\">{name}_{arg}</span>;\n"
            );
        }
        self.h += "</code></pre></div>\n";
    }
}

/// A page's buffer: its size, and some room for the last block.
fn page_capacity(size: usize) -> usize {
    size + 4096
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::super::{Shape, generate_shaped};
    use crate::html;

    /// The size at quantile `q` of sorted `sizes`.
    fn quantile(sizes: &[usize], q: f64) -> usize {
        sizes[((sizes.len() as f64 * q) as usize).min(sizes.len() - 1)]
    }

    #[test]
    fn docs_crawls_have_the_real_crawls_sizes_navigation_hubs_and_copies() {
        assert_eq!(generate_shaped(3, 300, Shape::Docs), generate_shaped(3, 300, Shape::Docs));
        assert_ne!(generate_shaped(3, 300, Shape::Docs), generate_shaped(4, 300, Shape::Docs));
        let pages = 2000;
        for seed in [1, 2] {
            let crawl = generate_shaped(seed, pages, Shape::Docs);
            assert_eq!((crawl.pages.len(), crawl.recrawls.len()), (pages, pages / 3));
            let mut sizes: Vec<usize> = crawl.pages.iter().map(|p| p.html.len()).collect();
            sizes.sort_unstable();
            // The real crawl: median 4.4 KB, 90th percentile 27 KB, 99th 264 KB, largest 2.9 MB.
            let (p50, p90, p99, max) =
                (quantile(&sizes, 0.5), quantile(&sizes, 0.9), quantile(&sizes, 0.99), sizes[pages - 1]);
            assert!((3_500..=6_000).contains(&p50), "seed {seed}: median {p50}");
            assert!((20_000..=34_000).contains(&p90), "seed {seed}: 90th percentile {p90}");
            assert!((150_000..=500_000).contains(&p99), "seed {seed}: 99th percentile {p99}");
            assert!((500_000..=3_000_000).contains(&max), "seed {seed}: largest {max}");
            // A third of the pages are copies: byte-identical to another page.
            let distinct: BTreeSet<&str> = crawl.pages.iter().map(|p| p.html.as_str()).collect();
            let copies = pages - distinct.len();
            assert!((pages * 32 / 100..=pages * 35 / 100).contains(&copies), "seed {seed}: {copies} copies");
            let urls: BTreeSet<&str> = crawl.pages.iter().map(|p| p.url.as_str()).collect();
            assert_eq!(urls.len(), pages, "URLs are unique");
            assert!(crawl.recrawls.iter().all(|r| urls.contains(r.url.as_str())), "re-crawls of crawled URLs");
            // Navigation: some pages carry a sidebar of hundreds of links; the first page (the
            // first site's home) is linked from every page of its site.
            let mut sources: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
            let (mut most_links, mut crawled, mut total) = (0, 0, 0);
            for p in &crawl.pages {
                html::check_url_key(&p.url).unwrap();
                let doc = html::parse(&p.url, &p.html);
                assert!(!doc.title.is_empty() && !doc.text.contains("invisible"), "{}", p.url);
                most_links = most_links.max(doc.links.len());
                total += doc.links.len();
                crawled += doc.links.iter().filter(|l| urls.contains(l.target.as_str())).count();
                for link in doc.links {
                    sources.entry(link.target).or_default().insert(&p.url);
                }
            }
            assert!(most_links >= 150, "seed {seed}: at most {most_links} links on a page");
            assert!(crawled * 10 > total * 9, "{crawled} of {total} links reach crawled pages");
            let hub = sources[&crawl.pages[0].url].len();
            assert!(hub > pages / 10, "seed {seed}: the first page has {hub} inlinks");
        }
    }

    #[test]
    fn docs_recrawls_edit_pages_and_bring_mirrors_back() {
        let crawl = generate_shaped(5, 600, Shape::Docs);
        let mut current: BTreeMap<&str, &str> = crawl.pages.iter().map(|p| (p.url.as_str(), p.html.as_str())).collect();
        let (mut edited, mut caught_up, mut same_html) = (0, 0, 0);
        for r in &crawl.recrawls {
            let old = current[r.url.as_str()];
            if old == r.html {
                same_html += 1;
            } else if current.values().any(|h| *h == r.html) {
                caught_up += 1;
            } else {
                edited += 1;
            }
            current.insert(&r.url, &r.html);
        }
        assert!(
            edited > 0 && caught_up > 0 && same_html > 0,
            "{edited} edited, {caught_up} caught up, {same_html} same"
        );
        for pages in [1, 2, 3, 10, 40] {
            let crawl = generate_shaped(1, pages, Shape::Docs);
            assert_eq!(crawl.pages.len(), pages);
            let urls: BTreeSet<&str> = crawl.pages.iter().map(|p| p.url.as_str()).collect();
            assert_eq!(urls.len(), pages);
        }
        assert!(generate_shaped(1, 0, Shape::Docs).pages.is_empty());
    }
}
