#!/usr/bin/env python3
"""Draws Ferrule's Grafana dashboards as PNG pictures from a Prometheus's answers.

Grafana is not available here, so each panel of charts/ferrule/dashboards/*.json is
drawn with matplotlib where Grafana would put it (its gridPos), from the same PromQL
(Grafana's variables set to All): time series as lines, stats as numbers, tables as
tables, the heatmap as a heatmap. `make dashboards` runs it at the end of the
integration test that feeds a real Prometheus (controller/tests/it/metrics.rs), into
docs/dashboards/.

    render.py --prometheus http://127.0.0.1:9090 --out docs/dashboards \
        --start UNIX --end UNIX [--step 2]
"""
import argparse
import datetime
import json
import math
import pathlib
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import dates as mdates  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "charts/ferrule/dashboards"
BG, PANEL, TEXT, GRID, DIM = "#111217", "#181b1f", "#ccccdc", "#2c3235", "#8e8e8e"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#705da0", "#37872d", "#fade2a", "#447ebc", "#c15c17"]


class Prom:
    def __init__(self, url, start, end, step, rate_interval):
        self.url, self.start, self.end, self.step = url.rstrip("/"), start, end, step
        self.rate_interval = rate_interval

    def _get(self, path, params):
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=30) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(body)
        return body["data"]

    def expr(self, e):
        rng = f"{int(self.end - self.start)}s"
        e = e.replace("$__rate_interval", self.rate_interval).replace("$__range", rng)
        e = e.replace("$__interval", f"{self.step}s")
        # Every other variable is All.
        return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", e)

    def range(self, e):
        d = self._get("/api/v1/query_range", {"query": self.expr(e), "start": self.start,
                                               "end": self.end, "step": self.step})
        return d["result"]

    def instant(self, e):
        d = self._get("/api/v1/query", {"query": self.expr(e), "time": self.end})
        if d["resultType"] == "scalar":
            return [{"metric": {}, "value": d["result"]}]
        return d["result"]


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def fmt_value(v, unit, decimals=None):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "No data"
    if unit == "percentunit":
        return f"{v * 100:.{1 if decimals is None else decimals}f}%"
    if unit in ("s", "dtdurations"):
        a = abs(v)
        if unit == "dtdurations" or a >= 3600:
            d, rem = divmod(int(a), 86400)
            h, rem = divmod(rem, 3600)
            m = rem // 60
            sign = "-" if v < 0 else ""
            return f"{sign}{d}d {h}h" if d else f"{sign}{h}h {m}m"
        if a >= 1 or a == 0:
            return f"{v:.2f} s"
        if a >= 1e-3:
            return f"{v * 1e3:.1f} ms"
        return f"{v * 1e6:.0f} µs"
    if unit in ("bytes", "Bps"):
        suffix = "/s" if unit == "Bps" else ""
        for u in ["B", "KiB", "MiB", "GiB", "TiB"]:
            if abs(v) < 1024 or u == "TiB":
                return f"{v:.1f} {u}{suffix}" if u != "B" else f"{v:.0f} B{suffix}"
            v /= 1024
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f}M{suffix}"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.2f}k{suffix}"
    if v == int(v):
        return f"{int(v)}{suffix}"
    if decimals is None and abs(v) < 1:
        return f"{v:.3g}{suffix}"
    return f"{v:.{2 if decimals is None else decimals}f}{suffix}"


def threshold_color(v, steps, default):
    color = default
    for s in steps or []:
        if s.get("value") is None or (v is not None and not math.isnan(v) and v >= s["value"]):
            color = s.get("color", color)
    return {"green": "#73bf69", "red": "#f2495c", "orange": "#ff9830"}.get(color, color)


def title(ax, p):
    """Titles are drawn on the panel's frame (render)."""


def draw_stat(ax, p, prom):
    title(ax, p)
    ax.set_xticks([]), ax.set_yticks([])
    d = p["fieldConfig"]["defaults"]
    v = None
    try:
        r = prom.instant(p["targets"][0]["expr"])
        if r:
            v = float(r[0]["value"][1])
    except Exception as e:  # noqa: BLE001
        print(f"  {p['title']}: {e}", file=sys.stderr)
    color = threshold_color(v, d.get("thresholds", {}).get("steps"), "#73bf69") if v is not None else DIM
    ax.text(0.5, 0.45, fmt_value(v, d.get("unit"), d.get("decimals")), ha="center", va="center",
            fontsize=20, color=color, fontweight="bold", transform=ax.transAxes)


def draw_timeseries(ax, p, prom):
    title(ax, p)
    d = p["fieldConfig"]["defaults"]
    unit = d.get("unit", "short")
    n = 0
    bars = d.get("custom", {}).get("drawStyle") == "bars"
    for t in p["targets"]:
        try:
            series = prom.range(t["expr"])
        except Exception as e:  # noqa: BLE001
            print(f"  {p['title']}: {e}", file=sys.stderr)
            continue
        for s in series[:10]:
            xs = [datetime.datetime.fromtimestamp(float(x)) for x, _ in s["values"]]
            ys = [float(y) for _, y in s["values"]]
            c = PALETTE[n % len(PALETTE)]
            label = legend(t.get("legendFormat"), s["metric"])
            if bars:
                ax.bar(xs, ys, width=prom.step / 86400.0 * 0.8, color=c, alpha=0.8, label=label)
            else:
                ax.plot(xs, ys, color=c, linewidth=1.2, label=label)
                ax.fill_between(xs, ys, color=c, alpha=0.08)
            n += 1
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_value(v, unit)))
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
    ax.grid(color=GRID, linewidth=0.5)
    ax.tick_params(colors=DIM, labelsize=6)
    if d.get("min") == 0 and n and ax.get_ylim()[0] < 0:
        ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1e-9))
    if n == 0:
        ax.text(0.5, 0.5, "No data", ha="center", va="center", color=DIM, transform=ax.transAxes)
    else:
        leg = ax.legend(loc="upper left", fontsize=6, frameon=False, labelcolor=TEXT,
                        ncol=2 if n > 4 else 1)
        leg.set_in_layout(False)


def draw_table(ax, p, prom):
    title(ax, p)
    ax.set_xticks([]), ax.set_yticks([])
    d = p["fieldConfig"]["defaults"]
    organize = next((t["options"] for t in p.get("transformations", []) if t["id"] == "organize"), {})
    rename = organize.get("renameByName", {})
    hidden = organize.get("excludeByName", {})
    names = {o["matcher"]["options"]: {pr["id"]: pr["value"] for pr in o["properties"]}
             for o in p["fieldConfig"].get("overrides", [])}
    rows, keys, cols = {}, [], []
    for i, t in enumerate(p["targets"]):
        col = "Value" if len(p["targets"]) == 1 else f"Value #{t['refId']}"
        cols.append(col)
        try:
            result = prom.instant(t["expr"])
        except Exception as e:  # noqa: BLE001
            print(f"  {p['title']}: {e}", file=sys.stderr)
            continue
        for s in result:
            labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
            for k in labels:
                if k not in keys:
                    keys.append(k)
            rows.setdefault(tuple(sorted(labels.items())), {})[col] = float(s["value"][1])
    keys = [k for k in keys if not hidden.get(k)]
    cols = [c for c in cols if not hidden.get(c)]
    index = organize.get("indexByName", {})
    keys.sort(key=lambda k: index.get(k, len(index)))
    header = [rename.get(k, k) for k in keys] + [names.get(c, {}).get("displayName", c) for c in cols]
    body = []
    for labels, values in sorted(rows.items())[:12]:
        lab = dict(labels)
        body.append([lab.get(k, "") for k in keys] +
                    [fmt_value(values.get(c), names.get(c, {}).get("unit", d.get("unit"))) for c in cols])
    if not body:
        ax.text(0.5, 0.5, "No data", ha="center", va="center", color=DIM, transform=ax.transAxes)
        return
    tab = ax.table(cellText=body, colLabels=header, loc="upper center", cellLoc="left")
    tab.auto_set_font_size(False)
    tab.set_fontsize(6.5)
    for (r, _), cell in tab.get_celld().items():
        cell.set_edgecolor(GRID)
        cell.set_facecolor(PANEL if r else "#22252b")
        cell.get_text().set_color(TEXT)
        cell.set_height(0.09)


def draw_heatmap(ax, p, prom):
    title(ax, p)
    try:
        series = prom.range(p["targets"][0]["expr"])
    except Exception as e:  # noqa: BLE001
        print(f"  {p['title']}: {e}", file=sys.stderr)
        series = []
    buckets = sorted(((float(s["metric"].get("le", "inf")), s) for s in series), key=lambda b: b[0])
    if not buckets:
        ax.set_xticks([]), ax.set_yticks([])
        ax.text(0.5, 0.5, "No data", ha="center", va="center", color=DIM, transform=ax.transAxes)
        return
    n = max(len(s["values"]) for _, s in buckets)
    grid, prev = [], [0.0] * n
    for _, s in buckets:
        cur = [float(v) for _, v in s["values"]] + [0.0] * (n - len(s["values"]))
        grid.append([max(c - p_, 0.0) for c, p_ in zip(cur, prev)])
        prev = cur
    ax.imshow(grid, aspect="auto", origin="lower", cmap="Oranges", interpolation="nearest")
    labels = [fmt_value(le, "s") if le != math.inf else "+Inf" for le, _ in buckets]
    step = max(1, len(labels) // 6)
    ax.set_yticks(range(0, len(labels), step))
    ax.set_yticklabels(labels[::step])
    ax.set_xticks([])
    ax.tick_params(colors=DIM, labelsize=6)


DRAW = {"stat": draw_stat, "timeseries": draw_timeseries, "table": draw_table, "heatmap": draw_heatmap}


def render(path, prom, out):
    d = json.loads(path.read_text())
    panels = []
    for p in d["panels"]:
        panels.append(p)
        panels.extend(p.get("panels", []))
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    col_in, row_in, head_in = 0.78, 0.36, 0.55  # inches per grid column, grid row, header
    fig_w, fig_h = 24 * col_in, rows * row_in + head_in
    fig = plt.figure(figsize=(fig_w, fig_h), facecolor=BG)
    fig.text(0.2 / fig_w, 1 - 0.28 / fig_h, d["title"], color=TEXT, fontsize=13,
             fontweight="bold", va="center")

    def box(x_in, y_in, w_in, h_in):  # inches from the top left -> figure fractions
        return [x_in / fig_w, 1 - (y_in + h_in) / fig_h, w_in / fig_w, h_in / fig_h]

    gap = 0.05
    for p in panels:
        g = p["gridPos"]
        x, y = g["x"] * col_in + gap, head_in + g["y"] * row_in + gap
        w, h = g["w"] * col_in - 2 * gap, g["h"] * row_in - 2 * gap
        if p["type"] == "row":
            fig.text((x + 0.05) / fig_w, 1 - (y + h / 2) / fig_h, p["title"], color=TEXT,
                     fontsize=11, va="center", fontweight="bold")
            continue
        frame = fig.add_axes(box(x, y, w, h))
        frame.set_facecolor(PANEL)
        frame.set_xticks([]), frame.set_yticks([])
        for sp in frame.spines.values():
            sp.set_color(GRID)
        fig.text((x + 0.08) / fig_w, 1 - (y + 0.16) / fig_h, p.get("title", ""), color=TEXT,
                 fontsize=8.5, va="center", fontweight="bold")
        title_in = 0.32
        if p["type"] in ("timeseries", "heatmap"):
            inner = box(x + 0.62, y + title_in, w - 0.72, h - title_in - 0.25)
        else:
            inner = box(x + 0.05, y + title_in, w - 0.1, h - title_in - 0.05)
        ax = fig.add_axes(inner)
        ax.set_facecolor(PANEL)
        for sp in ax.spines.values():
            sp.set_visible(p["type"] in ("timeseries", "heatmap"))
            sp.set_color(GRID)
        ax.set_title("")
        DRAW.get(p["type"], lambda ax, p, prom: None)(ax, p, prom)
        ax.set_title("")
        if p["type"] == "timeseries":
            ax.set_xlim(datetime.datetime.fromtimestamp(prom.start),
                        datetime.datetime.fromtimestamp(prom.end))
    out.mkdir(parents=True, exist_ok=True)
    target = out / (path.stem + ".png")
    fig.savefig(target, dpi=80, facecolor=BG)
    plt.close(fig)
    print(f"wrote {target}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--start", required=True, type=float)
    ap.add_argument("--end", required=True, type=float)
    ap.add_argument("--step", type=float, default=2)
    ap.add_argument("--rate-interval", default="10s")
    a = ap.parse_args()
    prom = Prom(a.prometheus, a.start, a.end, a.step, a.rate_interval)
    for path in sorted(DASHBOARDS.glob("*.json")):
        render(path, prom, a.out)


if __name__ == "__main__":
    main()
