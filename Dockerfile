# The kube-queue service image (webhook; the same image runs every `kq` subcommand).
#   docker build -t kube-queue:latest .
#   docker run --rm kube-queue:latest --help
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# An unprivileged, numeric user (runAsNonRoot can check it); the root filesystem may be read-only:
# the service writes only under /tmp (an emptyDir in manifests/webhook/deployment.yaml).
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9443 9090
ENTRYPOINT ["kq"]
CMD ["serve", "--help"]
