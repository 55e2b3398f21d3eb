# netdp: one image for the certificate service, the bootstrap, the nodes and the job submitter.
# The papers' experiments (experiments/, the netdp-experiments distribution) are not installed.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY netdp ./netdp
COPY netdp_node ./netdp_node
COPY netdp_bootstrap ./netdp_bootstrap
RUN pip install --no-cache-dir . && rm -rf /src
WORKDIR /
STOPSIGNAL SIGTERM
ENTRYPOINT ["netdp"]
CMD ["--help"]
