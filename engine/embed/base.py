"""The embedder interface: one embedder per *space* (e.g. ``text``, ``code``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:
    def __getattr__(name: str) -> Any:
        # numpy costs ~100 ms to import: the CLI's --help and argument errors should not pay it
        # for the space names below (PEP 562: resolved on first use of engine.embed.base.Vectors).
        if name == "Vectors":
            import numpy as np
            import numpy.typing as npt

            return npt.NDArray[np.float32]
        raise AttributeError(name)

#: The general space: every chunk, prose and code.
TEXT_SPACE = "text"
#: Code chunks only (code files and code blocks), embedded by a code model when one is configured.
CODE_SPACE = "code"
SPACES = (TEXT_SPACE, CODE_SPACE)


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed passages for storage; returns shape (len(texts), dimension)."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Embed search queries; returns shape (len(texts), dimension)."""
        ...
