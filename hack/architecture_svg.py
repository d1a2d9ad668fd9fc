"""Write docs/architecture.svg: the layers of the package and a job's way through the system.

Standard library only. Run from the repository root after changing the picture:

    python3 hack/architecture_svg.py            # rewrites docs/architecture.svg
    python3 hack/architecture_svg.py --check    # exit 1 when the committed file differs

tests/unit/test_docs_links.py runs the check, so the picture and this script stay in step.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "architecture.svg"
WIDTH, HEIGHT = 1000, 880
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"

SHELL = "#fdf1dc"
ADAPTER = "#e3f0e3"
CORE = "#dfeaf7"
API = "#ece4f5"
CLI = "#f4f4f4"
READMODEL = "#eef4ec"
FLOW = "#ffffff"
LOOP = "#fbe4e4"


def box(rect: tuple[int, int, int, int], title: str, lines: tuple[str, ...] = (), fill: str = FLOW) -> str:
    """A rounded box at ``(x, y, width, height)`` with a bold title and centred lines under it."""
    x, y, w, h = rect
    out = [f"<rect x='{x}' y='{y}' width='{w}' height='{h}' rx='8' fill='{fill}' stroke='#555'/>"]
    rows = 1 + len(lines)
    top = y + h / 2 - (rows - 1) * 8 + 4
    out.append(f"<text x='{x + w / 2}' y='{top:.0f}' text-anchor='middle' font-weight='bold' "
               f"font-size='13'>{escape(title)}</text>")
    for index, line in enumerate(lines, start=1):
        out.append(f"<text x='{x + w / 2}' y='{top + 16 * index:.0f}' text-anchor='middle' "
                   f"font-size='11.5'>{escape(line)}</text>")
    return "\n".join(out)


def arrow(points: tuple[tuple[int, int], ...], label: str = "", dashed: bool = False, left: bool = False) -> str:
    """A polyline ending in an arrowhead, with an optional label beside the end of its first segment (on its
    ``left``)."""
    path = " ".join(f"{x},{y}" for x, y in points)
    dash = " stroke-dasharray='5,4'" if dashed else ""
    out = [f"<polyline points='{path}' fill='none' stroke='#333' stroke-width='1.5'{dash} "
           "marker-end='url(#head)'/>"]
    if label:
        (x1, y1), (x2, y2) = points[0], points[1]
        anchor, shift = ("end", -6) if left else ("start", 6)
        out.append(f"<text x='{(x1 + x2) / 2 + shift:.0f}' y='{y2 - 6 if y2 != y1 else y1 - 4}' font-size='11' "
                   f"text-anchor='{anchor}' fill='#333'>{escape(label)}</text>")
    return "\n".join(out)


def text(x: int, y: int, value: str, size: float = 12, bold: bool = False) -> str:
    weight = " font-weight='bold'" if bold else ""
    return f"<text x='{x}' y='{y}' font-size='{size}'{weight}>{escape(value)}</text>"


def layers() -> list[str]:
    """The package's layers; an arrow reads "may import"."""
    shells = (
        ("admission", ("webhook: hold, tag,", "validate")),
        ("controller", ("queue: admit, reclaim,", "start timeout, status")),
        ("extender", ("scheduler extender:", "pod quota, placement")),
        ("sim", ("virtual clock over", "the core's decide()")),
        ("devcluster", ("local Kubernetes", "with kwok nodes")),
    )
    out = [text(20, 28, "The packages of webhook/: an arrow means \"may import\" (tests/unit/test_architecture.py)",
                14, bold=True)]
    out.append("<rect x='134' y='37' width='732' height='70' rx='10' fill='none' stroke='#999' "
               "stroke-dasharray='4,3'/>")
    out.append(text(140, 49, "faces", 11))
    out.append(box((140, 53, 470, 50), "cli", ("kq: the commands, and the wiring of the shells",
                                           "(kq serve, kq extender, kq simulate, kq dev)"), CLI))
    out.append(box((630, 53, 230, 50), "console", ("kq console: the web pages", "of developers and operators"), CLI))
    out.append(box((200, 135, 660, 44), "readmodel",
                   ("what both faces read and show: API access, snapshot, job views, why a job waits, "
                    "start estimates",), READMODEL))
    out.append("<rect x='134' y='197' width='732' height='94' rx='10' fill='none' stroke='#999' "
               "stroke-dasharray='4,3'/>")
    out.append(text(140, 209, "shells", 11))
    for index, (name, lines) in enumerate(shells):
        out.append(box((140 + index * 146, 215, 134, 70), name, lines, SHELL))
    out.append(box((880, 215, 105, 70), "kube", ("API client,", "watch caches"), SHELL))
    out.append(box((140, 325, 720, 50), "workloads",
                   ("one adapter per job kind: Job, Kubeflow, Ray, Argo Workflow, SparkApplication, Pod",), ADAPTER))
    out.append(box((140, 415, 720, 60), "core",
                   ("the rules, pure: quota tree, request, fit, queue order, reclaim, placement,",
                    "start timeout, integrity. Standard library only, no I/O, no clock"), CORE))
    out.append(box((140, 515, 720, 50), "api",
                   ("wire names (labels, annotations, namespaces, reasons), kinds, typed object views",), API))
    out.append(arrow(((500, 107), (500, 133))))
    out.append(arrow(((745, 107), (745, 133))))
    out.append(arrow(((165, 107), (165, 195))))
    out.append(arrow(((500, 179), (500, 195))))
    out.append(arrow(((500, 291), (500, 323))))
    out.append(arrow(((500, 375), (500, 413))))
    out.append(arrow(((500, 475), (500, 513))))
    out.append(arrow(((866, 250), (878, 250))))
    faces = ("Neither face", "imports the other;", "both sit on the", "readmodel.")
    out.extend(text(20, 70 + 16 * index, line, 11.5) for index, line in enumerate(faces))
    notes = (
        "Each shell does",
        "the I/O for one",
        "purpose; no shell",
        "imports another,",
        "a face or the",
        "readmodel.",
        "",
        "A layer may import",
        "the layers below;",
        "none imports",
        "upwards.",
    )
    out.extend(text(20, 214 + 16 * index, line, 11.5) for index, line in enumerate(notes))
    return out


def flow() -> list[str]:
    """A job from submission to its end, with the two ways back to the queue."""
    y = 625
    steps = (
        ("1 submit", ("kubectl create /", "kq submit, in a", "namespace of a leaf")),
        ("2 webhook", ("holds it, tags it", "with its quota,", "stamps submitted-at")),
        ("3 controller pass", ("decide(): order, fit,", "reclaim; releases it", "+ admission record")),
        ("4 job's controller", ("Job / Kubeflow /", "KubeRay controller", "creates the pods")),
        ("5 scheduler", ("+ extender: pod-level", "quota, ResourcePolicy", "units ECS then ECI")),
        ("6 kubelet", ("the pods run; a", "finished job frees", "its quota")),
    )
    out = [text(20, 605, "A job's way (docs/architecture.md#a-jobs-way)", 14, bold=True)]
    for index, (title, lines) in enumerate(steps):
        x = 20 + index * 164
        out.append(box((x, y, 140, 80), title, lines))
        if index:
            out.append(arrow(((x - 24, y + 40), (x - 2, y + 40))))
    out.append(box((20, 760, 440, 60), "reclaim (docs/reclaim.md)",
                   ("a job whose quota is within its min evicts borrowers' jobs:",
                    "held again, back at their place in the queue, never deleted"), LOOP))
    out.append(box((520, 760, 460, 60), "start timeout (docs/start-timeout.md)",
                   ("not started within --start-timeout: held again, backoff note,",
                    "queues again at its place at its retry time"), LOOP))
    out.append(arrow(((398, 705), (398, 758)), "evict", dashed=True))
    out.append(arrow(((910, 705), (910, 758)), "pods do not run", dashed=True, left=True))
    out.append(arrow(((560, 760), (560, 735), (430, 735), (430, 707)), dashed=True))
    out.append(arrow(((240, 760), (240, 735), (370, 735), (370, 707)), dashed=True))
    out.append(text(20, 860, "Generated by hack/architecture_svg.py; the same pictures in text are in "
                             "docs/architecture.md.", 11))
    return out


def render() -> str:
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' "
        f"viewBox='0 0 {WIDTH} {HEIGHT}' {FONT}>",
        "<title>kube-queue-py: layers and a job's way</title>",
        "<defs><marker id='head' markerWidth='10' markerHeight='8' refX='9' refY='4' orient='auto'>"
        "<path d='M0,0 L10,4 L0,8 z' fill='#333'/></marker></defs>",
        f"<rect width='{WIDTH}' height='{HEIGHT}' fill='white'/>",
        *layers(),
        *flow(),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    wanted = render()
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != wanted:
            print(f"{OUTPUT} is out of date: run python3 hack/architecture_svg.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
