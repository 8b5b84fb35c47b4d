"""gunicorn entry point: ``gunicorn -c api/gunicorn_conf.py api.wsgi:app``."""

from api import create_app
from api.batch_runner import start_batch_runner

app = create_app()
start_batch_runner(app)  # every serving process feeds OpenAI batches (one at a time each, by lease)
