# The planner REST service: slim image, no torch (the service never imports it).
#   docker build -t parallel-planner .
#   docker run -p 8000:8000 -v planner-data:/data parallel-planner
#   docker run -p 8000:8000 -e PLANNER_DATABASE_URL=postgresql+psycopg://user:pw@db/planner parallel-planner
#   scale-out (API replicas, `planner worker` processes, Redis, PostgreSQL): compose.yaml beside this file
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# only what the wheel needs; tests, benches and the torch extra stay out of the image
COPY pyproject.toml README.md ./
COPY cost_model ./cost_model
COPY planner ./planner
COPY profiler ./profiler
COPY api ./api
RUN pip install ".[postgres]" && rm -rf /src

RUN useradd --system --uid 10001 --home-dir /data --create-home planner
USER planner
WORKDIR /data

ENV PLANNER_HOST=0.0.0.0 \
    PLANNER_PORT=8000 \
    PLANNER_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8000

# slim has no curl: ask /healthz with the Python that is there
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import os,urllib.request;urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PLANNER_PORT','8000'), timeout=4)" || exit 1

CMD ["planner", "serve"]
