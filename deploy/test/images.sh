# shellcheck shell=bash
# Base images for deploy/test/run.sh, made from this machine's own Debian packages and Go
# toolchain, because the engine here reaches no registry. Sourced by run.sh.
#
# They are kept between runs as a cache: an image whose tag exists and whose recipe label
# matches is not rebuilt. DTQ_TEST_REBUILD_BASE=1 forces a rebuild.

# The tag the Dockerfile's first FROM names; users get the real one from Docker Hub.
GO_BASE_TAG=${GO_BASE_TAG:-golang:1.26-bookworm}
# The Redis server image the lifecycle tests run (test-only; never referenced by deploy/).
REDIS_TAG=${REDIS_TAG:-dtq-test/redis:7-bookworm}
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bump when the recipe below changes, so cached images are rebuilt.
BASE_RECIPE=1

log() { printf '%s deploy/test: %s\n' "$(date +%T)" "$*" >&2; }

# have_image TAG: the tag exists and was made by this recipe.
have_image() {
	local got
	got=$(docker image inspect --format '{{ index .Config.Labels "dtq.test.recipe" }}' "$1" 2>/dev/null) || return 1
	[[ $got == "$BASE_RECIPE" && ${DTQ_TEST_REBUILD_BASE:-0} != 1 ]]
}

# debian_root DIR PACKAGES: a minimal Debian root in DIR with PACKAGES (comma-separated).
debian_root() {
	command -v debootstrap >/dev/null || {
		log "installing debootstrap (Debian package)"
		apt-get install -y -qq debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
	}
	mkdir -p "$BASE_CACHE/debs"
	debootstrap --variant=minbase --cache-dir="$BASE_CACHE/debs" --include="$2" \
		"$DEBIAN_SUITE" "$1" "$DEBIAN_MIRROR" >"$1.log" 2>&1 || {
		tail -20 "$1.log" >&2
		return 1
	}
	# What the official images also drop: package lists and caches.
	rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb
}

# ensure_go_base: GO_BASE_TAG = Debian bookworm + ca-certificates + /usr/local/go, with
# the official golang image's environment.
ensure_go_base() {
	have_image "$GO_BASE_TAG" && { log "base $GO_BASE_TAG cached"; return 0; }
	local root="$BASE_CACHE/go-root" gov
	gov=$(/usr/local/go/bin/go env GOVERSION)
	log "building base $GO_BASE_TAG from debootstrap $DEBIAN_SUITE + /usr/local/go ($gov)"
	rm -rf "$root" && mkdir -p "$root"
	debian_root "$root" ca-certificates
	tar -C "$root" -cf - . -C / usr/local/go | docker import \
		--change "ENV GOLANG_VERSION=${gov#go}" \
		--change 'ENV GOTOOLCHAIN=local' \
		--change 'ENV GOPATH=/go' \
		--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'WORKDIR /go' \
		--change 'CMD ["bash"]' \
		--change "LABEL dtq.test.recipe=$BASE_RECIPE" \
		- "$GO_BASE_TAG" >/dev/null
	rm -rf "$root" "$root.log"
}

# ensure_redis: REDIS_TAG = Debian bookworm + redis-server (+ redis-cli), run as user redis.
ensure_redis() {
	have_image "$REDIS_TAG" && { log "base $REDIS_TAG cached"; return 0; }
	local root="$BASE_CACHE/redis-root"
	log "building $REDIS_TAG from debootstrap $DEBIAN_SUITE + redis-server"
	rm -rf "$root" && mkdir -p "$root"
	debian_root "$root" redis-server
	mkdir -p "$root/data" && chown --reference="$root/var/lib/redis" "$root/data"
	tar -C "$root" -cf - . | docker import \
		--change 'USER redis' \
		--change 'WORKDIR /data' \
		--change 'EXPOSE 6379' \
		--change 'ENTRYPOINT ["redis-server"]' \
		--change 'CMD ["--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
		--change "LABEL dtq.test.recipe=$BASE_RECIPE" \
		- "$REDIS_TAG" >/dev/null
	rm -rf "$root" "$root.log"
}
