# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity report as a picture (controller only): per node and GPU, each vGPU slot and the card's memory, shaded
by what running pods hold. ``layout`` places every shape (and is what the tests check pixels against), ``png`` draws
it with Pillow."""

from __future__ import annotations

import io

MARGIN = 16
LINE = 22          # one text line or one GPU row
SLOT = 22          # one vGPU slot's width
LABEL_W = 390      # "GPU 0  NVIDIA GeForce RTX 4070 SUPER  (unhealthy)"
TEXT_W = 140       # "16376 / 16376 MiB"; the legend needs LEGEND_W
LEGEND_W = 560
MEMORY_W = 260
COLOURS = {"background": (255, 255, 255), "text": (20, 20, 20), "held": (31, 119, 180), "free": (222, 235, 247),
           "outline": (90, 90, 90), "unhealthy": (214, 39, 40)}


def _memory_text(gpu):
    return "%d / %d MiB" % (gpu["memory_mib_allocated"], gpu["memory_mib"])


def layout(capacity):
    """(width, height, [shape]) - a shape is ("text", (x, y), text) or ("box", (x0, y0, x1, y1), fill) with fill one of
    COLOURS' keys; boxes are vGPU slots (held or free) and memory bars (held part over the free part)."""
    shapes, y = [], MARGIN
    totals = capacity["totals"]
    title = "vGPU capacity: %d GPUs, %d of %d vGPUs and %d of %d MiB held by running pods" % (
        totals["gpus"], totals["vgpus_allocated"], totals["vgpus"], totals["memory_mib_allocated"],
        totals["memory_mib"])
    shapes.append(("text", (MARGIN, y), title))
    y += LINE
    shapes.append(("box", (MARGIN, y + 4, MARGIN + 14, y + 18), "held"))
    shapes.append(("text", (MARGIN + 20, y + 2), "held"))
    shapes.append(("box", (MARGIN + 70, y + 4, MARGIN + 84, y + 18), "free"))
    shapes.append(("text", (MARGIN + 90, y + 2), "free (one square per vGPU; bar: the card's memory)"))
    y += LINE + 8
    slots_x = MARGIN + LABEL_W
    # One column of memory bars for the whole fleet, right of the widest split.
    widest = max([g["split"] for row in capacity["nodes"] for g in row["gpus"]] + [1])
    memory_x = slots_x + widest * SLOT + 12
    for row in capacity["nodes"]:
        shapes.append(("text", (MARGIN, y), "%s: %d of %d vGPUs, %d of %d MiB" % (
            row["node"], row["vgpus_allocated"], row["vgpus"], row["memory_mib_allocated"], row["memory_mib"])))
        y += LINE
        for index, gpu in enumerate(row["gpus"]):
            label = "  GPU %d  %s%s" % (index, gpu["model"], "" if gpu.get("healthy", True) else "  (unhealthy)")
            shapes.append(("text", (MARGIN, y + 3), label))
            for slot in range(gpu["split"]):
                x0 = slots_x + slot * SLOT
                shapes.append(("box", (x0, y + 2, x0 + SLOT - 4, y + LINE - 2),
                               "held" if slot < gpu["vgpus_allocated"] else "free"))
            shapes.append(("box", (memory_x, y + 4, memory_x + MEMORY_W, y + LINE - 4), "free"))
            share = min(gpu["memory_mib_allocated"] / gpu["memory_mib"], 1.0) if gpu["memory_mib"] else 0.0
            if share > 0:
                shapes.append(("box", (memory_x, y + 4, memory_x + max(int(MEMORY_W * share), 1), y + LINE - 4),
                               "held"))
            shapes.append(("text", (memory_x + MEMORY_W + 8, y + 3), _memory_text(gpu)))
            y += LINE
        y += 8
    return max(memory_x + MEMORY_W + TEXT_W, MARGIN + LEGEND_W), y + MARGIN, shapes


def png(capacity):
    """PNG bytes of the capacity picture; the same capacity gives the same bytes (no time stamp, no metadata)."""
    from PIL import Image, ImageDraw, ImageFont  # pylint: disable=import-outside-toplevel

    width, height, shapes = layout(capacity)
    image = Image.new("RGB", (width, height), COLOURS["background"])
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    for kind, where, what in shapes:
        if kind == "box":
            draw.rectangle(where, fill=COLOURS[what], outline=COLOURS["outline"] if what == "free" else None)
        else:
            draw.text(where, what, fill=COLOURS["unhealthy"] if "(unhealthy)" in what else COLOURS["text"], font=font)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
