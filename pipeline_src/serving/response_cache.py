"""Triton's response cache for the repository's ensembles, keyed so that a cached answer never outlives the models
and code that made it: each loaded ensemble is loaded at a version number that is the repository's *revision* (a
digest of every model folder's files and the step code they import, ``reload.ChangeWatch``'s view) with
``response_cache { enable: true }`` in a config override. Why (Triton's key ignores the steps' versions and never
expires) and what else keeps the cache honest: docs/api.md, "Answers from the cache".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline_src.serving.reload import DEFAULT_PACKAGES, ChangeWatch, is_ensemble, model_folders
from pipeline_src.serving.repository_api import TritonRepositoryApi

CACHE_CONFIG_FLAG = "--cache-config"
REVISION_FILE = "REVISION"  # the version folder of the override holds this one file: the revision's digest
SMALL_FILE_BYTES = 1 << 20  # configs, code, manifests, tokenizers: by content; weights: by size and mtime
MIB = 1 << 20


def cache_flags(extra_args: Sequence[str]) -> list[str]:
    return [argument for argument in extra_args if argument.split("=", 1)[0] == CACHE_CONFIG_FLAG]


def local_cache_args(size_mib: int) -> tuple[str, ...]:
    """Triton's local (in-process, LRU) cache of ``size_mib`` MiB; none for 0."""
    return (f"{CACHE_CONFIG_FLAG}=local,size={size_mib * MIB}",) if size_mib > 0 else ()


@dataclass(frozen=True)
class Revision:
    digest: str  # sha256 over the repository's files and step code

    @property
    def version(self) -> int:
        """A model version number from the digest: positive, 31 bits, never 1 (the folders on disk)."""
        return int(self.digest[:8], 16) % (2**31 - 2) + 2


def repository_revision(repository: Path, packages: Mapping[str, Path] = DEFAULT_PACKAGES) -> Revision:
    """Every file of every model folder and the step code they import. Large files by size and modification time
    (hashing gigabytes of weights at each start would be slow; a rebuilt or copied file counts as changed, so
    this errs towards a miss, never a stale hit)."""
    watch = ChangeWatch(repository, packages)
    digest = hashlib.sha256()
    for path, (mtime_ns, size) in sorted(watch.scan().snapshot.items()):
        digest.update(watch.relative(path).encode() + b"\0")
        digest.update(path.read_bytes() if size <= SMALL_FILE_BYTES else f"{size}:{mtime_ns}".encode())
        digest.update(b"\0")
    return Revision(digest.hexdigest())


@dataclass
class CachedEnsembles:
    """Loads each loaded ensemble at the repository's revision with the response cache on: at start (and each
    restart) of a tritonserver that caches, and after a step is reloaded. Before a step is reloaded, ``uncache``
    loads the ensembles as their folders have them (uncached): in between, an answer of the new step must not be
    stored under the old revision, nor the old step's answers looked up."""

    repository: Path
    triton: TritonRepositoryApi
    report: Callable[[str], None] = print
    packages: Mapping[str, Path] = field(default_factory=lambda: dict(DEFAULT_PACKAGES))

    def refresh(self) -> None:
        """Each loaded ensemble not yet at the revision loaded at it, cached; a line each says how that went."""
        revision = repository_revision(self.repository, self.packages)
        loaded = self.triton.ready_versions()
        for name in self.loaded_ensembles(loaded):
            if str(revision.version) in loaded[name]:
                continue
            error = self.load_cached(name, revision)
            version = f"version {revision.version} (revision {revision.digest[:12]})"
            if error is None:
                self.report(f"response cache: {name} cached, at {version}")
            else:
                self.report(f"response cache: {name} NOT cached at {version}, it keeps serving uncached: {error}")

    def uncache(self) -> None:
        for name in self.loaded_ensembles(self.triton.ready_models()):
            if (error := self.triton.load(name)) is not None:
                self.report(f"response cache: {name} could not be loaded uncached before a reload: {error}")

    def loaded_ensembles(self, loaded: Collection[str]) -> list[str]:
        folders = model_folders(self.repository)
        return [name for name, folder in folders.items() if name in loaded and is_ensemble(folder)]

    def load_cached(self, ensemble: str, revision: Revision) -> str | None:
        try:
            config = self.triton.model_config(ensemble)
        except OSError as exc:
            return f"its config could not be read: {exc}"
        config["response_cache"] = {"enable": True}
        files = {f"{revision.version}/{REVISION_FILE}": f"{revision.digest}\n".encode()}
        return self.triton.load(ensemble, config=json.dumps(config), files=files)
