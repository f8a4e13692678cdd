"""`wiki`: a small encyclopedia with talk pages (a forum per article): articles with infoboxes and links,
search, categories, comment posting and summary editing. Comments and edits live in the per-visitor state.
"""

from __future__ import annotations

from envs.sites.server import Request, Response, esc, page, redirect

ARTICLES: dict[str, dict] = {
    "port-alder": {
        "title": "Port Alder", "categories": ["Cities"],
        "info": {"Country": "Velland", "Population": "48,200", "Founded": "1712", "Founder": "Ines Marrow"},
        "summary": "Port Alder is a harbour city in Velland, at the mouth of the [[glass-river|Glass River]].",
        "body": "The city grew around its fish market. The [[kestrel-lighthouse|Kestrel Lighthouse]] guards the harbour entrance.",
    },
    "velland": {
        "title": "Velland", "categories": ["Countries"],
        "info": {"Capital": "Hollow Bay", "Population": "2.1 million", "Currency": "Vell crown"},
        "summary": "Velland is a coastal country. Its capital is [[hollow-bay|Hollow Bay]].",
        "body": "Major cities include [[port-alder|Port Alder]] and [[hollow-bay|Hollow Bay]].",
    },
    "hollow-bay": {
        "title": "Hollow Bay", "categories": ["Cities"],
        "info": {"Country": "Velland", "Population": "310,000", "Founded": "1544", "Founder": "Tomas Reyne"},
        "summary": "Hollow Bay is the capital of [[velland|Velland]].",
        "body": "The [[amber-creek|Amber Creek]] flows through the old town.",
    },
    "glass-river": {
        "title": "Glass River", "categories": ["Rivers"],
        "info": {"Length": "212 km", "Source": "Mount Sable", "Mouth": "Port Alder"},
        "summary": "The Glass River rises on [[mount-sable|Mount Sable]] and ends at [[port-alder|Port Alder]].",
        "body": "Its water is unusually clear, which gave the river its name.",
    },
    "amber-creek": {
        "title": "Amber Creek", "categories": ["Rivers"],
        "info": {"Length": "64 km", "Source": "Fenwood Hills", "Mouth": "Hollow Bay"},
        "summary": "Amber Creek is a short river that ends in [[hollow-bay|Hollow Bay]].",
        "body": "Peat in the Fenwood Hills colours its water.",
    },
    "tern-river": {
        "title": "Tern River", "categories": ["Rivers"],
        "info": {"Length": "130 km", "Source": "Mount Sable", "Mouth": "Gull Sound"},
        "summary": "The Tern River drains the northern slope of [[mount-sable|Mount Sable]].",
        "body": "It is known for its migrating terns.",
    },
    "mount-sable": {
        "title": "Mount Sable", "categories": ["Mountains"],
        "info": {"Elevation": "2,931 m", "Range": "Sable Range", "First ascent": "1851"},
        "summary": "Mount Sable is the highest peak of Velland and the source of the [[glass-river|Glass River]].",
        "body": "The first ascent was made by [[mira-okafor|Mira Okafor]]'s grandfather in 1851.",
    },
    "kestrel-lighthouse": {
        "title": "Kestrel Lighthouse", "categories": ["Buildings"],
        "info": {"Height": "38 m", "Built": "1887", "Designer": "Mira Okafor"},
        "summary": "The Kestrel Lighthouse stands at the entrance of the harbour of [[port-alder|Port Alder]].",
        "body": "It was designed by the engineer [[mira-okafor|Mira Okafor]] and first lit in 1887.",
    },
    "mira-okafor": {
        "title": "Mira Okafor", "categories": ["People"],
        "info": {"Born": "1849", "Birthplace": "Hollow Bay", "Occupation": "Engineer"},
        "summary": "Mira Okafor was an engineer born in [[hollow-bay|Hollow Bay]].",
        "body": "She designed the [[kestrel-lighthouse|Kestrel Lighthouse]].",
    },
    "ines-marrow": {
        "title": "Ines Marrow", "categories": ["People"],
        "info": {"Born": "1680", "Birthplace": "Gull Sound", "Occupation": "Merchant"},
        "summary": "Ines Marrow was a merchant who founded [[port-alder|Port Alder]] in 1712.",
        "body": "Her trading company dominated the coast for a century.",
    },
}
FEATURED = "kestrel-lighthouse"
SEED_COMMENTS: dict[str, list[tuple[str, str]]] = {
    "velland": [("Ana", "Should we add the 1990 census?"), ("Bo", "Yes, with a source."), ("Cy", "Done.")],
    "port-alder": [("Dee", "The fish market section needs a photo.")],
}


def link(text: str) -> str:
    """Render [[slug|Label]] wiki links."""
    out, rest = "", text
    while "[[" in rest and "]]" in rest.split("[[", 1)[1]:
        before, after = rest.split("[[", 1)
        inner, rest = after.split("]]", 1)
        slug, _, label = inner.partition("|")
        out += esc(before) + f"<a href='/wiki/{esc(slug)}'>{esc(label or slug)}</a>"
    return out + esc(rest)


def nav() -> str:
    return "<nav><a href='/'>Main page</a><a href='/categories'>Categories</a></nav>"


SEARCH = ("<form action='/search' method='get'><input name='q' type='search' aria-label='Search wiki' "
          "placeholder='Search wiki'><button type='submit'>Go</button></form>")


def handle(req: Request) -> Response:
    st, path = req.state, req.path.rstrip("/") or "/"
    st.setdefault("comments", {})
    st.setdefault("edits", {})
    parts = path.strip("/").split("/")
    if path == "/":
        items = "".join(f"<li><a href='/wiki/{s}'>{esc(a['title'])}</a></li>" for s, a in sorted(ARTICLES.items()))
        body = (f"<h1>Welcome to Loopwiki</h1>{SEARCH}<h2>Featured article</h2>"
                f"<p id='featured'><a href='/wiki/{FEATURED}'>{esc(ARTICLES[FEATURED]['title'])}</a></p>"
                f"<h2>All articles</h2><ul>{items}</ul>")
        return Response(page("Loopwiki", body, nav()))
    if parts[0] == "wiki" and len(parts) == 2 and parts[1] in ARTICLES:
        slug, a = parts[1], ARTICLES[parts[1]]
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in a["info"].items())
        cats = " ".join(f"<a href='/category/{esc(c)}'>{esc(c)}</a>" for c in a["categories"])
        summary = st["edits"].get(slug, a["summary"])
        body = (f"<h1>{esc(a['title'])}</h1><p><a href='/talk/{slug}'>Talk</a> <a href='/edit/{slug}'>Edit</a></p>"
                f"<table class='infobox'>{rows}</table><p id='summary'>{link(summary)}</p><p>{link(a['body'])}</p>"
                f"<p>Categories: {cats}</p>")
        return Response(page(a["title"] + " - Loopwiki", body, nav()))
    if path == "/search":
        q = req.arg("q").strip().lower()
        for s, a in ARTICLES.items():
            if q and q == a["title"].lower():
                return redirect(f"/wiki/{s}")
        hits = [(s, a) for s, a in sorted(ARTICLES.items())
                if q and (q in a["title"].lower() or q in a["summary"].lower() or q in a["body"].lower())]
        items = "".join(f"<li><a href='/wiki/{s}'>{esc(a['title'])}</a></li>" for s, a in hits)
        body = f"{SEARCH}<h1>Search results</h1><p>{len(hits)} results</p><ol id='results'>{items}</ol>"
        return Response(page("Search - Loopwiki", body, nav()))
    if path == "/categories":
        cats = sorted({c for a in ARTICLES.values() for c in a["categories"]})
        body = "<h1>Categories</h1><ul>" + "".join(f"<li><a href='/category/{c}'>{c}</a></li>" for c in cats) + "</ul>"
        return Response(page("Categories - Loopwiki", body, nav()))
    if parts[0] == "category" and len(parts) == 2:
        hits = [(s, a) for s, a in sorted(ARTICLES.items()) if parts[1] in a["categories"]]
        items = "".join(f"<li><a href='/wiki/{s}'>{esc(a['title'])}</a></li>" for s, a in hits)
        body = f"<h1>Category: {esc(parts[1])}</h1><p>{len(hits)} articles</p><ul>{items}</ul>"
        return Response(page(f"Category {parts[1]} - Loopwiki", body, nav()))
    if parts[0] == "talk" and len(parts) == 2 and parts[1] in ARTICLES:
        slug = parts[1]
        if req.method == "POST":
            name, text = req.arg("name").strip(), req.arg("comment").strip()
            if name and text:
                st["comments"].setdefault(slug, []).append((name, text))
            return redirect(f"/talk/{slug}")
        comments = SEED_COMMENTS.get(slug, []) + st["comments"].get(slug, [])
        items = "".join(f"<div class='comment'><b>{esc(n)}</b>: <span>{esc(t)}</span></div>" for n, t in comments)
        body = (f"<h1>Talk: {esc(ARTICLES[slug]['title'])}</h1><p id='comment-count'>{len(comments)} comments</p>{items}"
                f"<h2>Add a comment</h2><form method='post'><label for='name'>Your name</label><input id='name' name='name'>"
                f"<label for='comment'>Comment</label><textarea id='comment' name='comment'></textarea>"
                f"<button type='submit'>Post comment</button></form>")
        return Response(page(f"Talk: {ARTICLES[slug]['title']} - Loopwiki", body, nav()))
    if parts[0] == "edit" and len(parts) == 2 and parts[1] in ARTICLES:
        slug = parts[1]
        if req.method == "POST":
            st["edits"][slug] = req.arg("summary")
            return redirect(f"/wiki/{slug}")
        current = st["edits"].get(slug, ARTICLES[slug]["summary"])
        body = (f"<h1>Editing {esc(ARTICLES[slug]['title'])}</h1><form method='post'><label for='summary'>Summary</label>"
                f"<textarea id='summary' name='summary' rows='4' cols='80'>{esc(current)}</textarea>"
                f"<button type='submit'>Save</button></form>")
        return Response(page(f"Editing {ARTICLES[slug]['title']} - Loopwiki", body, nav()))
    return Response(page("Not found", "<h1>Page not found</h1>", nav()), 404)
