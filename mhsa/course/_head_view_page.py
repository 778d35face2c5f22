"""The HTML and JavaScript of :func:`mhsa.course.plotting.head_view`: two menus, one plotly figure.

The figure (a heatmap of one head's weights above a bar chart of one query's row) is built in Python
with plotly; this script only draws it and swaps the data when the reader picks another layer or head,
or hovers over a row; a click holds a row (hovering then changes nothing) until the next click. It calls the global ``Plotly`` of the page: the book loads the
plotly.js that ships inside the plotly package (``chapters/_ext/plotly_js.py``), never from a CDN.
"""

import html
import json

SCRIPT = """
(function () {
  const root = document.getElementById(%(id)s);
  const view = %(view)s;
  const status = root.querySelector("[data-role=status]");
  function start() {
    if (!window.Plotly) {
      status.textContent = "The interactive view needs plotly.js, which this page did not load; "
        + "the static figure below shows the same table.";
      return;
    }
    const plot = root.querySelector(".mhsa-head-view-plot");
    // the menus and the plot's container are hidden until this script runs: without JavaScript the
    // page shows only the status line, not dead menus above an empty block
    root.querySelectorAll("[data-needs-script]").forEach((element) => { element.hidden = false; });
    const layer = root.querySelector("select[data-role=layer]");
    const head = root.querySelector("select[data-role=head]");
    let row = view.row;
    let pinned = false;  // a click holds its row; hovering then changes nothing until the next click
    function describe() {
      const weights = view.weights[+layer.value][+head.value][row];
      const best = weights.indexOf(Math.max(...weights));
      status.textContent = "Query " + JSON.stringify(view.queries[row]) + " (row " + row
        + ") attends most to " + JSON.stringify(view.keys[best]) + " (weight "
        + weights[best].toFixed(2) + "). " + (pinned
          ? "Held by a click: click it again to let the pointer choose, or click another row."
          : "Hover over a row to see another query; click it to hold it while you read the bars.");
    }
    function draw() {
      const table = view.weights[+layer.value][+head.value];
      Plotly.restyle(plot, {z: [table]}, [0]);
      Plotly.restyle(plot, {y: [table[row]]}, [1]);
      Plotly.relayout(plot, {
        "title.text": view.title + ": " + layer.options[layer.selectedIndex].text + ", "
          + head.options[head.selectedIndex].text,
        "shapes[0].y0": row - 0.5, "shapes[0].y1": row + 0.5,
        "yaxis2.title.text": "row of " + JSON.stringify(view.queries[row])});
      root.dataset.shown = layer.value + "," + head.value + "," + row;
      root.dataset.pinned = String(pinned);
      describe();
    }
    function rowOf(event) {
      const point = event.points.find((p) => p.curveNumber === 0);
      return point ? point.pointIndex[0] : null;
    }
    function hover(event) {
      const picked = rowOf(event);
      if (pinned || picked === null || picked === row) return;
      row = picked;
      draw();
    }
    function click(event) {
      const picked = rowOf(event);
      if (picked === null) return;
      pinned = !(pinned && picked === row);  // a second click on the held row releases it
      row = picked;
      draw();
    }
    Plotly.newPlot(plot, view.figure.data, view.figure.layout,
                   {responsive: true, displayModeBar: false}).then(() => {
      plot.on("plotly_hover", hover);
      plot.on("plotly_click", click);
      layer.addEventListener("change", draw);
      head.addEventListener("change", draw);
      draw();
      root.dataset.ready = "true";
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
"""


def _options(role: str, labels: list[str], selected: int) -> str:
    items = "".join(f'<option value="{k}"{" selected" if k == selected else ""}>'
                    f"{html.escape(label)}</option>" for k, label in enumerate(labels))
    # wide enough for the longest label and the arrow, whatever width the page's style gives menus
    width = max(len(label) for label in labels) + 4
    return (f'<label style="margin-right:1em">{role} <select data-role="{role}" '
            f'aria-label="{role}" style="width:auto;min-width:{width}ch">{items}</select></label>')


def page(view_id: str, figure_json: str, view: dict, layer_labels, head_labels, height: int) -> str:
    """The HTML of one head view: controls, the plot's container, a status line, the script.

    The controls and the container carry ``hidden`` until the script shows them, so a page read
    without JavaScript shows the status line's message right under the code, not an empty block.
    """
    data = json.loads(figure_json)
    payload = {**view, "figure": data}
    script = SCRIPT % {"id": json.dumps(view_id),
                       "view": json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")}
    return (
        f'<div class="mhsa-head-view" id="{view_id}">\n'
        f'<div class="mhsa-head-view-controls" data-needs-script hidden>'
        f'{_options("layer", layer_labels, view["layer"])}'
        f'{_options("head", head_labels, view["head"])}</div>\n'
        f'<div class="mhsa-head-view-plot" data-needs-script hidden '
        f'style="width:100%;height:{height}px"></div>\n'
        f'<p data-role="status" aria-live="polite">The interactive view needs JavaScript; the '
        f"static figure below shows the same table.</p>\n"
        f"</div>\n<script>{script}</script>\n"
    )
