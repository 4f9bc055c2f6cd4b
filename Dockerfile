# Herald in a container: `docker compose up` (docker-compose.yml) runs it with PostgreSQL.
#
# Not built by this repository's CI: no container registry is reachable there. What CI does
# test is the runtime below without Docker: scripts/release-check.sh installs the same binary
# (release mode, Swift runtime linked in) on a Debian bookworm root with the same packages
# (ca-certificates, tzdata) and delivers a notification with it.
#
#   docker build --build-arg HERALD_COMMIT=$(git rev-parse --short=12 HEAD) -t herald .

FROM swift:6.3-bookworm AS build
ARG HERALD_COMMIT=""
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
COPY Fuzz ./Fuzz
RUN if [ -n "$HERALD_COMMIT" ]; then \
        sed -i "s/static let commit: String? = nil/static let commit: String? = \"$HERALD_COMMIT\"/" \
            Sources/herald/BuildInfo.swift; \
    fi \
    && swift build -c release --product herald --static-swift-stdlib \
    && install -m 0755 "$(swift build -c release --show-bin-path)/herald" /usr/local/bin/herald

FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system herald \
    && useradd --system --gid herald --home-dir /var/lib/herald --shell /usr/sbin/nologin herald \
    && install -d -m 0750 -o herald -g herald /var/lib/herald /etc/herald
COPY --from=build /usr/local/bin/herald /usr/bin/herald
COPY --chown=root:herald --chmod=0640 packaging/herald.yaml /etc/herald/herald.yaml
USER herald
WORKDIR /var/lib/herald
VOLUME /var/lib/herald
EXPOSE 8080
# /livez answers without a key and does no I/O; bash's /dev/tcp needs no extra package.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /livez HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3 | grep -q ' 200 '"]
# SIGTERM stops it gracefully (outbox.shutdown_grace, 20 s): give `docker stop` more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["herald"]
CMD ["serve", "--config", "/etc/herald/herald.yaml", "--host", "0.0.0.0"]
