"""`shop`: a small web store (categories, search, product pages with an iframe widget, cart, checkout,
orders, help page with a newsletter form). Cart, orders and subscription live in the per-visitor state.
"""

from __future__ import annotations

from envs.sites.server import Request, Response, esc, page, redirect

PRODUCTS = [
    # id, name, category, price, rating, stock, colors, ship_days, description
    (1, "Aurora Desk Lamp", "home", 34.99, 4.4, 12, ["White", "Black"], 2, "An adjustable LED desk lamp with three brightness levels."),
    (2, "Ceramic Mug Set", "home", 24.50, 4.7, 30, [], 2, "Four stoneware mugs, dishwasher safe."),
    (3, "Electric Kettle", "home", 45.00, 4.1, 8, ["Silver"], 4, "A 1.7 litre kettle that boils in three minutes."),
    (4, "Noise-Cancelling Headphones", "electronics", 129.00, 4.6, 5, ["Black", "Navy"], 3, "Over-ear headphones with 30 hours of battery."),
    (5, "USB-C Charger", "electronics", 19.99, 4.2, 50, [], 1, "A 65 W charger for laptops and phones."),
    (6, "Smart Speaker", "electronics", 59.00, 3.9, 14, ["Grey", "Sand"], 3, "A speaker with a voice assistant and room-filling sound."),
    (7, "Graph Paper Notebook", "books", 6.25, 4.8, 200, [], 2, "A5, 120 pages of 5 mm grid paper."),
    (8, "The Quiet Atlas", "books", 18.00, 4.5, 9, [], 5, "A novel about cartographers who map silence."),
    (9, "Field Guide to Birds", "books", 27.40, 4.3, 11, [], 5, "Three hundred species with colour plates."),
    (10, "Trail Water Bottle", "outdoor", 15.75, 4.5, 40, ["Blue", "Green", "Orange"], 3, "A 750 ml insulated bottle that keeps drinks cold for 24 hours."),
    (11, "Camping Lantern", "outdoor", 22.00, 4.0, 17, [], 4, "A rechargeable lantern with 300 lumens."),
    (12, "Two-Person Tent", "outdoor", 149.00, 4.2, 3, ["Green"], 6, "A light three-season tent for two."),
]
CATEGORIES = {"home": "Home", "electronics": "Electronics", "books": "Books", "outdoor": "Outdoor"}
SHIPPING = {"standard": ("Standard", 5.00), "express": ("Express", 15.00)}
FIELDS = ("id", "name", "category", "price", "rating", "stock", "colors", "ship_days", "description")


def product(pid: int) -> dict | None:
    for p in PRODUCTS:
        if p[0] == pid:
            return dict(zip(FIELDS, p))
    return None


def money(x: float) -> str:
    return f"${x:,.2f}"


def nav(req: Request) -> str:
    n = sum(i["qty"] for i in req.state.get("cart", []))
    cats = "".join(f"<a href='/category/{k}'>{v}</a>" for k, v in CATEGORIES.items())
    return (f"<nav><a href='/'>Loopback Shop</a>{cats}<a href='/cart'>Cart ({n})</a><a href='/orders'>My orders</a>"
            f"<a href='/help'>Help</a></nav>")


def listing(items: list[dict]) -> str:
    return "".join(
        f"<div class='product'><a href='/product/{p['id']}'>{esc(p['name'])}</a> "
        f"<span class='price'>{money(p['price'])}</span> <span>Rating {p['rating']}</span></div>"
        for p in items
    )


SEARCH_FORM = ("<form action='/search' method='get' role='search'><input name='q' type='search' "
               "aria-label='Search products' placeholder='Search products'><button type='submit'>Search</button></form>")


def handle(req: Request) -> Response:
    st, path = req.state, req.path.rstrip("/") or "/"
    st.setdefault("cart", [])
    st.setdefault("orders", [])
    parts = path.strip("/").split("/")
    if path == "/":
        deals = listing([product(5), product(7)])
        cats = "".join(f"<li><a href='/category/{k}'>{v}</a></li>" for k, v in CATEGORIES.items())
        body = f"<h1>Welcome to Loopback Shop</h1>{SEARCH_FORM}<h2>Categories</h2><ul>{cats}</ul><h2>Deals of the day</h2>{deals}"
        return Response(page("Loopback Shop", body, nav(req)))
    if parts[0] == "category" and len(parts) == 2 and parts[1] in CATEGORIES:
        items = [product(p[0]) for p in PRODUCTS if p[2] == parts[1]]
        sort = req.arg("sort")
        if sort == "price_asc":
            items.sort(key=lambda p: p["price"])
        elif sort == "price_desc":
            items.sort(key=lambda p: -p["price"])
        elif sort == "rating":
            items.sort(key=lambda p: -p["rating"])
        opts = "".join(f"<option value='{v}'{' selected' if v == sort else ''}>{t}</option>" for v, t in
                       [("", "Featured"), ("price_asc", "Price: low to high"), ("price_desc", "Price: high to low"),
                        ("rating", "Best rated")])
        form = (f"<form method='get'><label for='sort'>Sort by</label><select id='sort' name='sort'>{opts}</select>"
                f"<button type='submit'>Apply</button></form>")
        body = f"<h1>{CATEGORIES[parts[1]]}</h1><p>{len(items)} products</p>{form}{listing(items)}"
        return Response(page(CATEGORIES[parts[1]] + " - Loopback Shop", body, nav(req)))
    if path == "/search":
        q = req.arg("q").strip()
        hits = [product(p[0]) for p in PRODUCTS if q and (q.lower() in p[1].lower() or q.lower() in p[8].lower())]
        body = f"{SEARCH_FORM}<h1>Search results</h1><p id='result-count'>{len(hits)} results for '{esc(q)}'</p>{listing(hits)}"
        return Response(page(f"Search: {q} - Loopback Shop", body, nav(req)))
    if parts[0] == "product" and len(parts) == 2 and parts[1].isdigit() and product(int(parts[1])):
        p = product(int(parts[1]))
        color = ""
        if p["colors"]:
            opts = "".join(f"<option>{c}</option>" for c in p["colors"])
            color = f"<label for='color'>Color</label><select id='color' name='color'>{opts}</select>"
        body = (
            f"<h1>{esc(p['name'])}</h1><p class='price' id='price'>{money(p['price'])}</p>"
            f"<p>Rating: <span id='rating'>{p['rating']}</span> / 5</p><p>In stock: <span id='stock'>{p['stock']}</span></p>"
            f"<p>{esc(p['description'])}</p>"
            f"<form method='post' action='/cart/add'><input type='hidden' name='id' value='{p['id']}'>{color}"
            f"<label for='qty'>Quantity</label><input id='qty' name='qty' type='number' min='1' value='1'>"
            f"<button type='submit'>Add to cart</button></form>"
            f"<h2>Shipping</h2><iframe title='Shipping estimate' src='/widget/shipping/{p['id']}' width='400' height='80'></iframe>"
        )
        return Response(page(p["name"] + " - Loopback Shop", body, nav(req)))
    if parts[:2] == ["widget", "shipping"] and len(parts) == 3 and parts[2].isdigit() and product(int(parts[2])):
        p = product(int(parts[2]))
        return Response(f"<!DOCTYPE html><html><body><p id='estimate'>Ships in {p['ship_days']} days</p>"
                        f"<button onclick=\"this.textContent='Estimate refreshed'\">Refresh estimate</button></body></html>")
    if path == "/cart/add" and req.method == "POST":
        p = product(int(req.arg("id", "0") or 0))
        if not p:
            return Response(page("Error", "<p>Unknown product</p>", nav(req)), 400)
        try:
            qty = max(1, int(req.arg("qty", "1")))
        except ValueError:
            qty = 1
        color = req.arg("color")
        for item in st["cart"]:
            if item["id"] == p["id"] and item["color"] == color:
                item["qty"] += qty
                break
        else:
            st["cart"].append({"id": p["id"], "color": color, "qty": qty})
        return redirect("/cart")
    if path == "/cart/remove" and req.method == "POST":
        idx = int(req.arg("index", "-1") or -1)
        if 0 <= idx < len(st["cart"]):
            st["cart"].pop(idx)
        return redirect("/cart")
    if path == "/cart":
        rows, total = "", 0.0
        for i, item in enumerate(st["cart"]):
            p = product(item["id"])
            sub = p["price"] * item["qty"]
            total += sub
            rows += (f"<tr class='cart-item'><td>{esc(p['name'])}</td><td>{esc(item['color'] or '-')}</td>"
                     f"<td>{item['qty']}</td><td>{money(sub)}</td><td><form method='post' action='/cart/remove'>"
                     f"<input type='hidden' name='index' value='{i}'><button type='submit' aria-label='Remove {esc(p['name'])}'>Remove</button></form></td></tr>")
        if rows:
            body = (f"<h1>Your cart</h1><table id='cart'><tr><th>Product</th><th>Color</th><th>Qty</th><th>Subtotal</th><th></th></tr>{rows}</table>"
                    f"<p id='cart-total'>Total: {money(total)}</p><a href='/checkout'>Proceed to checkout</a>")
        else:
            body = "<h1>Your cart</h1><p id='cart-empty'>Your cart is empty.</p>"
        return Response(page("Cart - Loopback Shop", body, nav(req)))
    if path == "/checkout":
        err = f"<p class='error' role='alert'>{esc(req.arg('error'))}</p>" if req.arg("error") else ""
        opts = "".join(f"<option value='{k}'>{n} ({money(c)})</option>" for k, (n, c) in SHIPPING.items())
        body = (f"<h1>Checkout</h1>{err}<form method='post' action='/order'>"
                f"<label for='name'>Full name</label><input id='name' name='name' required><br>"
                f"<label for='address'>Address</label><input id='address' name='address' required><br>"
                f"<label for='city'>City</label><input id='city' name='city'><br>"
                f"<label for='shipping'>Shipping</label><select id='shipping' name='shipping'>{opts}</select><br>"
                f"<label><input type='checkbox' name='agree' value='yes'> I agree to the terms</label><br>"
                f"<button type='submit'>Place order</button></form>")
        return Response(page("Checkout - Loopback Shop", body, nav(req)))
    if path == "/order" and req.method == "POST":
        if not st["cart"]:
            return redirect("/checkout?error=Your+cart+is+empty")
        if not req.arg("name").strip() or not req.arg("address").strip():
            return redirect("/checkout?error=Name+and+address+are+required")
        if req.arg("agree") != "yes":
            return redirect("/checkout?error=You+must+agree+to+the+terms")
        ship = req.arg("shipping", "standard")
        ship = ship if ship in SHIPPING else "standard"
        number = 1001 + len(st["orders"])
        items = [dict(i) for i in st["cart"]]
        total = sum(product(i["id"])["price"] * i["qty"] for i in items) + SHIPPING[ship][1]
        st["orders"].append({"number": number, "items": items, "shipping": ship, "name": req.arg("name").strip(),
                             "address": req.arg("address").strip(), "city": req.arg("city").strip(), "total": total})
        st["cart"] = []
        return redirect(f"/order/{number}")
    if parts[0] == "order" and len(parts) == 2 and parts[1].isdigit():
        o = next((o for o in st["orders"] if o["number"] == int(parts[1])), None)
        if o is None:
            return Response(page("Not found", "<p>No such order</p>", nav(req)), 404)
        return Response(page(f"Order #{o['number']}", _order_html(o), nav(req)))
    if path == "/orders":
        body = "<h1>My orders</h1>" + ("".join(f"<div class='order'>{_order_html(o)}</div>" for o in st["orders"])
                                       or "<p>No orders yet.</p>")
        return Response(page("My orders - Loopback Shop", body, nav(req)))
    if path == "/help":
        sub = st.get("subscribed")
        news = (f"<p id='subscribed'>Subscribed as {esc(sub)}</p>" if sub else
                "<form method='post' action='/subscribe'><label for='email'>Email</label>"
                "<input id='email' name='email' type='email'><button type='submit'>Subscribe</button></form>")
        body = ("<h1>Help</h1><h2>Returns</h2><p>You can return any item within 30 days of delivery.</p>"
                "<h2>Contact</h2><p>Write to support@shop.local, we answer within one business day.</p>"
                f"<h2>Newsletter</h2>{news}")
        return Response(page("Help - Loopback Shop", body, nav(req)))
    if path == "/subscribe" and req.method == "POST":
        if "@" in req.arg("email"):
            st["subscribed"] = req.arg("email").strip()
        return redirect("/help")
    return Response(page("Not found", "<h1>Page not found</h1>", nav(req)), 404)


def _order_html(o: dict) -> str:
    rows = "".join(f"<li>{esc(product(i['id'])['name'])} x {i['qty']}{' (' + esc(i['color']) + ')' if i['color'] else ''}</li>"
                   for i in o["items"])
    return (f"<h2>Order #{o['number']}</h2><p>Order #{o['number']} confirmed for {esc(o['name'])}, {esc(o['address'])}"
            f"{', ' + esc(o['city']) if o['city'] else ''}.</p><ul>{rows}</ul>"
            f"<p>Shipping: {SHIPPING[o['shipping']][0]}</p><p>Total: {money(o['total'])}</p>")
