from __future__ import annotations

import os

from tests.support import SHARED

os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
