"""granian's ASGI entry point (``python -m api.serve``): the Flask app behind the body-reading front."""

from api.asgi_front import AsgiFront
from api.body_limits import BodyLimits
from api.wsgi import app as wsgi_app
from tasks.settings import ApiSettings

_settings = ApiSettings.from_env()
#: The front reads no body larger than its route takes (api/body_limits.py), and its 413 names the setting.
BODY_LIMITS = BodyLimits.from_settings(_settings)
app = AsgiFront(wsgi_app, _settings.api_threads, BODY_LIMITS)
