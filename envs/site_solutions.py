"""Scripted solutions for every local-site task, as semantic steps resolved against the live page (element
ids change with every navigation, so steps name their target by role and accessible name):
("click", role, name), ("type", role, name, text, enter), ("select", role, name, option), ("back",),
("see", text) = the text must be visible on the page now (a check, and a fact the agent notes), ("stop", answer).

`plan(task_id, goal, elements)` turns them into `jaxwebrl.demos.actions.Step`s, which
`demos.collect.collect_demonstrations` writes in the run's action grammar: local-site demonstrations for
behaviour cloning in every paper's format.
"""

from __future__ import annotations

from typing import Any, Sequence

from jaxwebrl.demos.actions import Step


SOLUTIONS: dict[str, list[tuple]] = {
    "shop_001": [("type", "searchbox", "Search products", "Aurora", 1), ("click", "link", "Aurora Desk Lamp"),
                 ("see", "$34.99"), ("stop", "$34.99")],
    "shop_002": [("click", "link", "Books")],
    "shop_003": [("type", "searchbox", "Search products", "kettle", 1)],
    "shop_004": [("click", "link", "Outdoor"), ("see", "3 products"), ("stop", "3")],
    "shop_005": [("click", "link", "Outdoor"), ("click", "link", "Trail Water Bottle"),
                 ("select", "combobox", "Color", "Blue"), ("type", "spinbutton", "Quantity", "2", 0),
                 ("click", "button", "Add to cart")],
    "shop_006": [("click", "link", "Electronics"), ("select", "combobox", "Sort by", "Price: low to high"),
                 ("click", "button", "Apply"), ("see", "USB-C Charger"), ("stop", "USB-C Charger")],
    "shop_007": [("type", "searchbox", "Search products", "mug", 1), ("click", "link", "Ceramic Mug Set"),
                 ("click", "button", "Add to cart"), ("click", "link", "Proceed to checkout"),
                 ("type", "textbox", "Full name", "Ada Lovelace", 0), ("type", "textbox", "Address", "12 Analytical St", 0),
                 ("type", "textbox", "City", "London", 0), ("select", "combobox", "Shipping", "Express ($15.00)"),
                 ("click", "checkbox", "I agree to the terms"), ("click", "button", "Place order"), ("see", "confirmed")],
    "shop_008": [("click", "link", "Help"), ("see", "30 days"), ("stop", "30 days")],
    "shop_009": [("click", "link", "Help"), ("type", "textbox", "Email", "grace@example.com", 1),
                 ("see", "Subscribed as grace@example.com")],
    "shop_010": [("type", "searchbox", "Search products", "headphones", 1),
                 ("click", "link", "Noise-Cancelling Headphones"), ("see", "4.6"), ("stop", "4.6")],
    "shop_011": [("click", "link", "Home"), ("select", "combobox", "Sort by", "Price: high to low"),
                 ("click", "button", "Apply")],
    "shop_012": [("type", "searchbox", "Search products", "lamp", 1), ("click", "link", "Aurora Desk Lamp"),
                 ("click", "button", "Add to cart"), ("click", "link", "Home"), ("click", "link", "Ceramic Mug Set"),
                 ("click", "button", "Add to cart"), ("click", "button", "Remove Aurora Desk Lamp")],
    "shop_013": [("click", "link", "Outdoor"), ("click", "link", "Trail Water Bottle"), ("see", "Ships in 3 days"),
                 ("stop", "Ships in 3 days")],
    "shop_014": [("type", "searchbox", "Search products", "notebook", 1), ("click", "link", "Graph Paper Notebook"),
                 ("type", "spinbutton", "Quantity", "3", 0), ("click", "button", "Add to cart"),
                 ("click", "link", "Proceed to checkout"), ("type", "textbox", "Full name", "Alan Turing", 0),
                 ("type", "textbox", "Address", "7 Bletchley Rd", 0), ("click", "checkbox", "I agree to the terms"),
                 ("click", "button", "Place order"), ("see", "Order #1001"), ("stop", "Order number 1001")],
    "shop_015": [("click", "link", "Help"), ("see", "support@shop.local"), ("stop", "support@shop.local")],
    "shop_016": [("type", "searchbox", "Search products", "lantern", 1), ("click", "link", "Camping Lantern"),
                 ("see", "17"), ("stop", "17")],
    "wiki_001": [("click", "link", "Port Alder"), ("see", "48,200"), ("stop", "48,200")],
    "wiki_002": [("click", "link", "Glass River")],
    "wiki_003": [("type", "searchbox", "Search wiki", "Mira Okafor", 1), ("see", "1849"), ("stop", "1849")],
    "wiki_004": [("click", "link", "Velland"), ("see", "Hollow Bay"), ("stop", "Hollow Bay")],
    "wiki_005": [("click", "link", "Glass River"), ("click", "link", "Rivers"), ("see", "3 articles"), ("stop", "3")],
    "wiki_006": [("click", "link", "Glass River"), ("click", "link", "Port Alder"), ("see", "Ines Marrow"),
                 ("stop", "Ines Marrow")],
    "wiki_007": [("click", "link", "Talk"), ("type", "textbox", "Your name", "Sam", 0),
                 ("type", "textbox", "Comment", "Population figure needs a source.", 0), ("click", "button", "Post comment")],
    "wiki_008": [("type", "searchbox", "Search wiki", "lighthouse", 1)],
    "wiki_009": [("click", "link", "Kestrel Lighthouse"), ("click", "link", "Edit"),
                 ("type", "textbox", "Summary", "The Kestrel Lighthouse stands at the entrance of the harbour of "
                  "[[port-alder|Port Alder]]. It is still in use.", 0), ("click", "button", "Save")],
    "wiki_010": [("see", "Kestrel Lighthouse"), ("stop", "Kestrel Lighthouse")],
    "wiki_011": [("click", "link", "Glass River"), ("see", "212 km"), ("back",), ("click", "link", "Amber Creek"),
                 ("see", "64 km"), ("stop", "Glass River")],
    "wiki_012": [("click", "link", "Kestrel Lighthouse"), ("see", "38 m"), ("stop", "38 m")],
    "wiki_013": [("click", "link", "Kestrel Lighthouse"), ("click", "link", "Mira Okafor"), ("see", "Hollow Bay"),
                 ("stop", "Hollow Bay")],
    "wiki_014": [("click", "link", "Velland"), ("click", "link", "Talk"), ("see", "3 comments"), ("stop", "3")],
    "wiki_015": [("click", "link", "Cities")],
    "wiki_016": [("click", "link", "Mount Sable"), ("see", "2,931 m"), ("stop", "2,931 m")],
}


def to_steps(raw: Sequence[tuple]) -> list[Step]:
    """Tuples as above -> Steps; a "see" becomes a check step whose text is noted with the next action."""
    out: list[Step] = []
    for t in raw:
        kind = t[0]
        if kind == "click":
            out.append(Step("click", role=t[1], name=t[2]))
        elif kind == "type":
            out.append(Step("type", role=t[1], name=t[2], text=t[3], enter=bool(t[4])))
        elif kind == "select":
            out.append(Step("select", role=t[1], name=t[2], text=t[3]))
        elif kind == "back":
            out.append(Step("back"))
        elif kind == "see":
            out.append(Step("see", text=t[1]))
        elif kind == "stop":
            out.append(Step("stop", text=t[1]))
        else:
            raise ValueError(f"unknown solution step {t!r}")
    return out


def plan(task_id: str, goal: str = "", elements: Sequence[Any] = ()) -> list[Step]:
    """The scripted solution of local-site task `task_id` (the solver signature of `collect_demonstrations`)."""
    if task_id not in SOLUTIONS:
        raise KeyError(f"no scripted solution for local-site task {task_id!r}")
    return to_steps(SOLUTIONS[task_id])
