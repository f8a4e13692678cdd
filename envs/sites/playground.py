"""`playground`: one page with every kind of element the action spaces touch (inputs, select, checkbox,
links, new-tab link, hover menu, drag target, alert, tall scroll area, iframe), plus a second page. Used by
the action and safety tests and by nothing else. `?fetch=<url>` makes the page fetch another origin (the
allowlist test).
"""

from __future__ import annotations

import json

from envs.sites.server import Request, Response, esc, page

SCRIPT = """
<script>
function log(m) { document.getElementById('log').textContent = m; }
window.addEventListener('load', () => {
  const f = new URLSearchParams(location.search).get('fetch');
  if (f) fetch(f).then(r => r.text()).then(t => log('fetched: ' + t.slice(0, 40)))
                 .catch(e => log('fetch blocked'));
  const drag = document.getElementById('drag'), drop = document.getElementById('drop');
  let down = false;
  drag.addEventListener('mousedown', () => { down = true; });
  document.addEventListener('mouseup', (e) => {
    if (!down) return; down = false;
    const r = drop.getBoundingClientRect();
    if (e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top && e.clientY <= r.bottom) log('dropped');
  });
  document.getElementById('hoverme').addEventListener('mouseenter', () => log('hovered'));
  document.getElementById('rc').addEventListener('contextmenu', (e) => { e.preventDefault(); log('right-clicked'); });
  document.getElementById('dbl').addEventListener('dblclick', () => log('double-clicked'));
  document.getElementById('keys').addEventListener('keydown', (e) => { if (e.ctrlKey && e.key === 'b') log('ctrl+b'); });
  document.getElementById('upper').addEventListener('input', (e) => { e.target.value = e.target.value.toUpperCase(); });
});
</script>"""


GRID_NAMES = [[f"cell {r}{c}" for c in range(3)] for r in range(3)]
# distinct solid colours (the screenshot test reads them back at the clicked point)
GRID_COLOURS = [["#ff0000", "#00ff00", "#0000ff"], ["#ffff00", "#ff00ff", "#00ffff"], ["#800000", "#008000", "#000080"]]


def handle(req: Request) -> Response:
    path = req.path.rstrip("/") or "/"
    if path == "/":
        body = (
            "<h1>Playground</h1><p id='log'>ready</p>"
            "<button id='btn' onclick=\"log('clicked')\">Press me</button>"
            "<button id='dbl'>Double me</button><button id='rc'>Right me</button>"
            "<span id='hoverme' style='padding:4px;border:1px solid'>Hover target</span>"
            "<form action='/submitted' method='get'><label for='q'>Query</label><input id='q' name='q'>"
            "<button type='submit'>Submit</button></form>"
            "<label for='upper'>Shout</label><input id='upper'>"
            "<label for='keys'>Keys</label><input id='keys'>"
            "<label for='fruit'>Fruit</label><select id='fruit' onchange=\"log('fruit=' + this.value)\">"
            "<option value='a'>Apple</option><option value='b'>Banana</option><option value='c'>Cherry</option></select>"
            "<label><input type='checkbox' id='cb' onchange=\"log('cb=' + this.checked)\"> Subscribe</label>"
            "<p><a href='/page2'>Go to page 2</a> <a href='/page2' target='_blank'>Open page 2 in new tab</a></p>"
            "<button onclick=\"alert('hi'); log('alert closed')\">Alert me</button>"
            "<button onclick=\"log('confirm=' + confirm('sure?'))\">Confirm me</button>"
            "<div id='drag' style='width:80px;height:40px;background:#9cf'>Drag me</div>"
            "<div id='drop' style='width:200px;height:80px;background:#fc9;margin-top:20px'>Drop zone</div>"
            "<iframe title='inner' src='/inner' width='300' height='100'></iframe>"
            "<div class='tall'><p>Far below</p></div><p id='bottom'>Bottom of page</p>"
            + SCRIPT
        )
        return Response(page("Playground", body))
    if path == "/grid":  # nine solid buttons spread over the viewport, placed in % so every viewport shows all
        cells = "".join(
            f"<button id='g{r}{c}' onclick=\"log('{GRID_NAMES[r][c]}')\" style='position:fixed;"
            f"left:{8 + 38 * c}%;top:{14 + 34 * r}%;width:12%;height:12%;border:0;margin:0;padding:0;"
            f"background:{GRID_COLOURS[r][c]};color:{GRID_COLOURS[r][c]}'>{GRID_NAMES[r][c]}</button>"
            for r in range(3) for c in range(3))
        return Response(page("Grid", "<p id='log' style='position:fixed;left:0;top:0;margin:0'>ready</p>" + cells
                             + "<script>function log(m) { document.getElementById('log').textContent = m; }</script>"))
    if path == "/page2":
        return Response(page("Page two", "<h1>Second page</h1><p id='p2'>You reached page two.</p>"
                                          "<a href='/'>Back home</a>"))
    if path == "/submitted":
        return Response(page("Submitted", f"<h1>Submitted</h1><p id='echo'>q={esc(req.arg('q'))}</p>"))
    if path == "/inner":
        return Response("<!DOCTYPE html><html><body><p>Inside frame</p>"
                        "<button onclick=\"this.textContent='frame clicked'\">Frame button</button></body></html>")
    if path == "/data.json":
        return Response(json.dumps({"secret": "cross-origin data"}), content_type="application/json",
                        headers={"Access-Control-Allow-Origin": "*"})
    return Response(page("Not found", "<h1>Page not found</h1>"), 404)
