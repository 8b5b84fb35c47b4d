"""granian's ASGI entry point (``python -m api.serve``): the Flask app behind the body-reading front."""

from api.asgi_front import AsgiFront
from api.wsgi import app as wsgi_app
from tasks.settings import ApiSettings

_settings = ApiSettings.from_env()
#: The front reads no body larger than the largest any route takes; each route's own limit answers below that.
BODY_LIMIT = max(_settings.max_content_length, _settings.batch_max_content_length, _settings.max_upload_bytes)
app = AsgiFront(wsgi_app, _settings.api_threads, BODY_LIMIT)
