"""Known auto-captioning models (hub ids, kinds, download sizes) and a quick "is the hub reachable" check.

No Qt, no torch: the Auto-caption panel lists these as suggestions, and checks the network before a
download so that an offline machine gets a plain sentence at once instead of retries and a raw
``[Errno -2]``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

from guitrainer.base.units import format_bytes

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class KnownCaptioner:
    """A captioning model that works with the panel: its hub id, kind, what it writes, its download size."""

    hub_id: str
    kind: str  # "wd14" | "blip"
    label: str
    size_mb: int  # approximate download, MB (10**6 bytes, as the hub lists it)

    def text(self) -> str:
        return f"{self.label} — {self.hub_id} (about {format_bytes(self.size_mb * 1_000_000)} download)"


KNOWN_CAPTIONERS: tuple[KnownCaptioner, ...] = (
    KnownCaptioner("SmilingWolf/wd-vit-tagger-v3", "wd14", "WD ViT tagger v3: tags, fast", 380),
    KnownCaptioner("SmilingWolf/wd-swinv2-tagger-v3", "wd14", "WD SwinV2 tagger v3: tags, more accurate", 470),
    KnownCaptioner("SmilingWolf/wd-v1-4-moat-tagger-v2", "wd14", "WD MOAT tagger v2: tags", 330),
    KnownCaptioner("Salesforce/blip-image-captioning-base", "blip", "BLIP base: short sentences", 990),
    KnownCaptioner("Salesforce/blip-image-captioning-large", "blip", "BLIP large: better sentences", 1880),
)


def known_for(kind: str) -> list[KnownCaptioner]:
    return [c for c in KNOWN_CAPTIONERS if c.kind == kind]


def looks_like_hub_id(source: str) -> bool:
    """``owner/name`` that is not a folder on this computer."""
    text = source.strip()
    if not text or text.count("/") != 1 or text.startswith((".", "/", "~")) or "\\" in text or ":" in text:
        return False
    return not os.path.exists(os.path.expanduser(text))


def hub_host() -> str:
    """The host downloads go to (``HF_ENDPOINT`` when set)."""
    return urlparse(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).hostname or "huggingface.co"


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when a TCP connection to the hub's HTTPS port opens within ``timeout_s`` (one try, no retries)."""
    try:
        with socket.create_connection((hub_host(), 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def offline_message(hub_id: str) -> str:
    return (
        f"No network: “{hub_id}” cannot be downloaded now (the model hub {hub_host()} cannot be reached). "
        "Connect to the internet and try again, or download the model once and choose its folder."
    )
