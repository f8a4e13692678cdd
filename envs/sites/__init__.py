"""Local multi-page sites served on loopback: `shop`, `wiki` (with talk pages) and the `playground` test page."""

from envs.sites import playground, shop, wiki

SITES = {"shop": shop.handle, "wiki": wiki.handle, "playground": playground.handle}
