"""What an image in a prompt costs in tokens, by the provider's published rule.

    image_tokens("data:image/png;base64,iVBOR...", detail="high")        # -> 765 (2048x2048)
    image_tokens("https://example.com/cat.png", detail="auto")            # -> 1445, the bound
    image_tokens(url, rule=ANTHROPIC)                                     # w*h/750, capped

The size is read from the data URL's header with Pillow (only a prefix of
the base64 is decoded: every format keeps its size near the start). A
remote URL is not fetched, so it counts at the rule's upper bound: the most
any image can cost (``OPENAI_MAX`` at high or auto detail, ``ANTHROPIC_MAX``).
An image Pillow cannot read counts at that bound too, never at zero.

OpenAI (chat and Responses, GPT-4o family): ``detail: low`` is 85 tokens;
``high`` and ``auto`` scale the image to fit 2048x2048, then its shortest
side down to 768, and cost 85 + 170 per 512-px tile. Anthropic: an image
over 1568 px on its long edge (or about 1.15 megapixels) is scaled down,
then costs width x height / 750 tokens (at most about 1,600).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import warnings

OPENAI, ANTHROPIC = "openai", "anthropic"
OPENAI_LOW, OPENAI_BASE, OPENAI_TILE = 85, 85, 170
OPENAI_MAX = OPENAI_BASE + OPENAI_TILE * 8        # 2048 x 768 after scaling: 4 x 2 tiles
ANTHROPIC_LONG_EDGE, ANTHROPIC_PIXELS, ANTHROPIC_DIVISOR = 1568, 1_150_000, 750
ANTHROPIC_MAX = 1600          # Anthropic's own figure for the largest image it reads
# Base64 characters decoded to find the size: PNG, GIF and WebP keep it in
# their first 30 bytes; a JPEG after its EXIF segments, usually within 64 KiB.
HEADER_B64_CHARS = 1 << 16
MAX_HEADER_B64_CHARS = 1 << 20


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a data URL's image, None when unknown (remote, or unreadable)."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 256)
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    data = url[comma + 1:]
    take = HEADER_B64_CHARS
    while True:
        size = _size_of(data[:take])
        if size is not None or take >= min(len(data), MAX_HEADER_B64_CHARS):
            return size
        take *= 4          # a JPEG with a long EXIF block: read further


def _size_of(b64: str) -> tuple[int, int] | None:
    from PIL import Image  # a dependency of matplotlib's too; imported on first image only

    cut = len(b64) - len(b64) % 4
    try:
        raw = base64.b64decode(b64[:cut], validate=False)
    except (binascii.Error, ValueError):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # DecompressionBombWarning: nothing is decoded
            with Image.open(io.BytesIO(raw)) as image:
                width, height = image.size
    except Exception:     # truncated, or not an image Pillow knows
        return None
    return (width, height) if width > 0 and height > 0 else None


def openai_tokens(width: int, height: int, detail: str = "auto") -> int:
    if detail == "low":
        return OPENAI_LOW
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return OPENAI_BASE + OPENAI_TILE * tiles


def anthropic_tokens(width: int, height: int) -> int:
    w, h = float(width), float(height)
    scale = min(1.0, ANTHROPIC_LONG_EDGE / max(w, h), math.sqrt(ANTHROPIC_PIXELS / (w * h)))
    return max(1, math.ceil(w * scale * h * scale / ANTHROPIC_DIVISOR))


def image_tokens(url: str, detail: str = "auto", rule: str = OPENAI) -> int:
    """Tokens one image costs under ``rule``; the rule's bound when its size is unknown."""
    if rule == OPENAI and detail == "low":
        return OPENAI_LOW
    size = image_size(url)
    if rule == ANTHROPIC:
        return ANTHROPIC_MAX if size is None else anthropic_tokens(*size)
    return OPENAI_MAX if size is None else openai_tokens(*size, detail)
