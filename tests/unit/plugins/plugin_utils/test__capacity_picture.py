"""The capacity picture: every vGPU slot and memory bar is where layout() puts it, in the colour of what running pods
hold, read back from the PNG's pixels."""

import io

from PIL import Image

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _capacity_picture as picture


def card(split, held, memory=24564, memory_held=0, model="NVIDIA GeForce RTX 4090", healthy=True):
    return {"model": model, "split": split, "vgpus": split, "vgpus_allocated": held, "memory_mib": memory,
            "memory_mib_allocated": memory_held, "healthy": healthy}


CAPACITY = {
    "nodes": [
        {"node": "rig01", "gpus": [card(2, 1, memory_held=12282), card(2, 0)], "vgpus": 4, "vgpus_allocated": 1,
         "memory_mib": 49128, "memory_mib_allocated": 12282},
        {"node": "rig02", "gpus": [card(4, 4, 16376, 16376, "NVIDIA GeForce RTX 4070 SUPER", healthy=False)],
         "vgpus": 4, "vgpus_allocated": 4, "memory_mib": 16376, "memory_mib_allocated": 16376},
    ],
    "totals": {"gpus": 3, "vgpus": 8, "vgpus_allocated": 5, "memory_mib": 65504, "memory_mib_allocated": 28658},
}


def pixels(capacity):
    image = Image.open(io.BytesIO(picture.png(capacity)))
    assert image.format == "PNG"
    return image.convert("RGB")


def centre(box):
    return ((box[0] + box[2]) // 2, (box[1] + box[3]) // 2)


def test_each_slot_and_bar_has_the_colour_of_what_pods_hold():
    width, height, shapes = picture.layout(CAPACITY)
    image = pixels(CAPACITY)
    assert image.size == (width, height)
    boxes = [(where, fill) for kind, where, fill in shapes if kind == "box"]
    # Legend (2) + rig01: 2 + 2 slots, 2 memory bars, one of them half held + rig02: 4 slots, a full memory bar.
    assert len(boxes) == 2 + 4 + 2 + 1 + 4 + 2
    for where in [where for where, fill in boxes]:
        # Drawn in order: the last box over a point gives its colour (a held share over its free bar).
        x, y = centre(where)
        [*dummy, (top, fill)] = [(w, f) for w, f in boxes if w[0] <= x <= w[2] and w[1] <= y <= w[3]]
        assert image.getpixel((x, y)) == picture.COLOURS[fill], (where, top, fill)
    slots = [fill for where, fill in boxes if where[2] - where[0] == picture.SLOT - 4]
    assert slots == ["held", "free", "free", "free", "held", "held", "held", "held"]


def test_memory_bars_are_filled_by_their_share():
    dummy, dummy, shapes = picture.layout(CAPACITY)
    bars = [where for kind, where, fill in shapes if kind == "box" and where[2] - where[0] >= picture.MEMORY_W // 2]
    free_bar, held_half = bars[0], bars[1]
    assert held_half[2] - held_half[0] == picture.MEMORY_W // 2
    image = pixels(CAPACITY)
    y = (free_bar[1] + free_bar[3]) // 2
    assert image.getpixel((free_bar[0] + picture.MEMORY_W // 4, y)) == picture.COLOURS["held"]
    assert image.getpixel((free_bar[0] + 3 * picture.MEMORY_W // 4, y)) == picture.COLOURS["free"]


def test_texts_name_nodes_gpus_and_figures():
    texts = [what for kind, where, what in picture.layout(CAPACITY)[2] if kind == "text"]
    assert texts[0] == "vGPU capacity: 3 GPUs, 5 of 8 vGPUs and 28658 of 65504 MiB held by running pods"
    assert "rig01: 1 of 4 vGPUs, 12282 of 49128 MiB" in texts
    assert "  GPU 0  NVIDIA GeForce RTX 4070 SUPER  (unhealthy)" in texts
    assert "12282 / 24564 MiB" in texts


def test_the_same_capacity_gives_the_same_bytes():
    assert picture.png(CAPACITY) == picture.png(CAPACITY)
    empty = {"nodes": [], "totals": {"gpus": 0, "vgpus": 0, "vgpus_allocated": 0, "memory_mib": 0,
                                     "memory_mib_allocated": 0}}
    assert pixels(empty).size == picture.layout(empty)[:2]
