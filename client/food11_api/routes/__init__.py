"""The API's routes, one ``APIRouter`` a concern; ``create_app`` includes them."""
