"""``python -m food11_api``: serve the API with uvicorn, configured by FOOD11_API_* variables."""

import uvicorn

from food11_api.app import create_app
from food11_api.settings import ApiSettings


def main() -> None:
    settings = ApiSettings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
