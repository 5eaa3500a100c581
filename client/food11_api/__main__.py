"""``python -m food11_api``: serve the API with uvicorn, configured by FOOD11_API_* variables."""

import sys

import uvicorn

from food11_api.app import create_app
from food11_api.callers import CallerKeysError
from food11_api.settings import ApiSettings


def main() -> None:
    settings = ApiSettings()
    try:
        app = create_app(settings)
    except CallerKeysError as exc:  # a keys file that cannot be used: say why, in one line, and do not start
        sys.exit(f"error: {exc}")
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
