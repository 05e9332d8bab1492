# The monitor's image for docker-compose: Python 3.11, Java 17 for Spark, the package.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/isr
COPY pyproject.toml README.md ./
COPY isr ./isr
COPY jobs ./jobs
COPY conf ./conf
RUN pip install --no-cache-dir .
ENV PYSPARK_PYTHON=python3
ENTRYPOINT ["isr"]
