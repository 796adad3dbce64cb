"""Which program reads which LoRA file as trained: what each reader's own code does with each network type, DoRA
layout and save precision, in plain words (README, "Which program reads which file", has the table and how
each row was found).

Pure data and words, no torch: the Output page shows :func:`save_precision_note` while the user chooses, Verify
(:mod:`guitrainer.engine.verify.variants`) heads its per-reader lines with :data:`READER_NAMES` and adds the
numbers it measures on the file. The readers, and the code each fact comes from:

* ComfyUI (``comfy/weight_adapter/{lora,loha,lokr,base}.py``; Forge's ``backend/patcher/lora.py`` copies the same
  ``weight_decompose``): every type, computed in fp32 (``intermediate_dtype``) from the file's tensors. A
  dora_scale per output row is normalised by the base weight's row norms, not the merged weight's.
* A1111 (``extensions-builtin/Lora/network_{lora,hada,lokr}.py``, ``network.py``, ``networks.py``): every type;
  LoHa and LoKr are computed in the file's dtype and added to the weight in it (``weight.to(updown.dtype) +
  updown``); DoRA always per input column (``apply_weight_decompose``), so a per-row dora_scale is broadcast
  over the columns.
* LyCORIS (``lycoris/kohya.py`` ``create_network_from_weights``, ``lycoris/modules/{locon,loha,lokr}.py``): builds
  DoRA per output row (``wd_on_out=True``) and cannot copy a per-column dora_scale into it; guesses LoKr's factor
  from the factors' shapes, counting a split conv factor's kernel into the input size; its LoHa merge
  (``get_merged_weight``, used by ``merge_to``) multiplies by alpha / rank twice (its forward once).
* diffusers (``loaders/lora_pipeline.py``): drops every ``dora_scale`` with a warning (a DoRA file becomes a
  plain LoRA); refuses LoHa and LoKr for SD 1.5 / SDXL.
* kohya sd-scripts ``networks.lora`` (``create_network_from_weights``): sizes its modules from ``lora_down``
  keys, so LoHa / LoKr give it no module and a ``dora_scale`` is left unused (a plain LoRA). Through
  ``--network_module lycoris.kohya`` it is LyCORIS.
"""

from __future__ import annotations

#: the readers, in the order Verify reports them
READER_NAMES = {
    "comfyui": "ComfyUI / Forge",
    "a1111": "A1111",
    "lycoris": "LyCORIS",
    "diffusers": "diffusers",
    "kohya": "kohya's networks.lora",
}

#: A1111 on a full-size SD 1.5 LoHa file on fp32 weights, the worst module's error as a share of its change
#: (||W'_A1111 - W'_trained|| / ||W'_trained - W||; ``bench/variant_readers.py``, bench/RESULTS.md "Which program
#: reads which variant file"), per save precision; ComfyUI on the same file for comparison. On fp16 weights
#: (A1111's default on a GPU) an fp16 file costs nothing more than the model's own rounding, a bf16 one 0.18.
A1111_LOW_PRECISION_ERROR = {"fp16": "0.022", "bf16": "0.17"}
COMFYUI_LOW_PRECISION_ERROR = {"fp16": "4e-4", "bf16": "3e-3"}


def reads_as_trained(kind: str, dora_layout: str = "column") -> tuple[str, ...]:
    """The readers whose merge of a ``kind`` file gives the trained weights (up to the file's rounding)."""
    if kind in ("lora", "locon"):
        return ("comfyui", "a1111", "lycoris", "diffusers", "kohya")
    if kind == "loha":
        return ("comfyui", "a1111", "lycoris")  # LyCORIS through its forward; its merge_to: see reader_facts
    if kind == "lokr":
        return ("comfyui", "a1111")  # LyCORIS: unless its factor guess misses a module (Verify counts them)
    return ("lycoris",) if dora_layout == "row" else ("comfyui", "a1111")


def reader_facts(kind: str, dora_layout: str = "column") -> dict[str, str]:
    """What each reader's own code does with a ``kind`` file (DoRA: of ``dora_layout``), reader -> words."""
    if kind in ("lora", "locon"):
        return {r: "reads it" for r in READER_NAMES}
    facts = {
        "comfyui": "reads it",
        "a1111": "reads it",
        "diffusers": "refuses it (no LoHa / LoKr for SD 1.5 / SDXL)",
        "kohya": "builds no module from it (it sizes modules from lora_down keys): use lycoris.kohya",
    }
    if kind == "loha":
        facts["lycoris"] = "reads it; its merge (merge_to) multiplies by alpha / rank twice"
    elif kind == "lokr":
        facts["lycoris"] = ("reads it where its factor guess finds each module's split; it counts a split 3x3 "
                            "factor's kernel into the input size and stops on such modules")
    else:
        facts["diffusers"] = facts["kohya"] = "drops dora_scale: reads it as a plain LoRA"
        if dora_layout == "row":
            facts["comfyui"] = "reads it, but divides by the base weight's row norms, not the merged weight's"
            facts["a1111"] = "misreads it: it divides each row's magnitude by every column's norm"
            facts["lycoris"] = "reads it"
        else:
            facts["lycoris"] = "stops: it builds dora_scale per output row and cannot copy this per-column one"
    return facts


def save_precision_note(kind: str, save_precision: str) -> str:
    """What ``save_precision`` costs a ``kind`` file in a reader ("" when nothing): A1111 computes LoHa and LoKr in
    the file's dtype, so a half-precision save loses there what ComfyUI keeps."""
    if kind not in ("loha", "lokr") or save_precision not in A1111_LOW_PRECISION_ERROR:
        return ""
    a1111, comfy = A1111_LOW_PRECISION_ERROR[save_precision], COMFYUI_LOW_PRECISION_ERROR[save_precision]
    label = {"loha": "LoHa", "lokr": "LoKr"}[kind]
    base = " and rounds the base weight to bf16 when it adds them" if save_precision == "bf16" else ""
    return (f"A1111 computes {label} in the file's precision{base}: a {save_precision} file is off there by up to "
            f"{a1111} of a module's change (ComfyUI: {comfy}; measured on a full-size SD 1.5 LoHa). "
            f"Save as fp32 for A1111 (twice the {save_precision} file's size).")
