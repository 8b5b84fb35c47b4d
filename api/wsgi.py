"""gunicorn entry point: ``gunicorn -c api/gunicorn_conf.py api.wsgi:app``."""

from api import create_app

app = create_app()
