"""Baseline (a), the course's way before this product: one FastAPI process that preprocesses,
classifies and captions in-process, one request at a time, with Hugging Face BLIP fp32 `generate`. Same
model files and step code as the pipeline, so the comparison measures the serving, not the models.

``python -m benchmarks.lib.course_server --repository model_repository --port 8090``
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import uvicorn
from fastapi import FastAPI, UploadFile

from benchmarks.lib.in_process import InProcessPipeline


def create_app(repository: Path) -> FastAPI:
    pipeline = InProcessPipeline(repository, course=True)
    one_at_a_time = threading.Lock()
    app = FastAPI(title="course-style baseline")

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/caption")
    def caption(photo: UploadFile) -> dict:  # a sync endpoint: FastAPI runs it in its thread pool
        data = photo.file.read()
        with one_at_a_time:
            answer = pipeline([data])[0]
        return {"label": answer.label, "probability": answer.probability, "caption": answer.caption}

    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.repository), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
