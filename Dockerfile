# The toolchain the project is tested with (Swift 6.3).
FROM swift:6.3-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libpq-dev libssl-dev libmicrohttpd-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
COPY Resources ./Resources
# Only the product: `ledger-dev` and the test-support targets (LedgerTesting, CryptoTesting) are
# not built, so nothing in the image can mint a test root. Tests/ is copied because Package.swift
# declares the test targets.
RUN swift build -c release --product ledger --static-swift-stdlib

FROM debian:bookworm-slim
# --static-swift-stdlib links Foundation into the binary, but not the C libraries under it:
# FoundationNetworking's URLSession (outbound HTTPS to the App Store Server API and verifyReceipt)
# loads libcurl.so.4, FoundationXML (WeChat's XML pushes) libxml2.so.2 (`ldd ledger` lists both).
# ca-certificates is the trust store URLSession checks Apple's TLS certificates against.
RUN apt-get update && apt-get install -y --no-install-recommends libpq5 libssl3 libmicrohttpd12 libcurl4 libxml2 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ledger
COPY --from=build /src/.build/release/ledger /usr/local/bin/ledger
COPY Migrations /opt/ledger/Migrations
COPY Resources /opt/ledger/Resources
ENV LEDGER_MIGRATIONS_DIR=/opt/ledger/Migrations LEDGER_RESOURCES_DIR=/opt/ledger/Resources
# Never root: the service needs no privilege beyond its port (8080 > 1024) and its files.
USER ledger
EXPOSE 8080
CMD ["ledger", "serve"]
