#!/usr/bin/env bash
# Container lifecycle tests: build the dtq image from the repository's Dockerfile, run
# it beside a Redis container on a private network, and stop, kill, cut off, roll and
# cold-start workers (deploy/test/*_test.go, Go, build tag "docker").
#
#   deploy/test/run.sh            needs a Docker engine; root (or debootstrap + docker
#                                 rights) the first time, to make the base images
#
# Exit status: 0 all passed; 1 a test or the build failed; 3 no Docker engine answers
# (nothing was run: the caller decides whether that is an error).
#
# No image can be pulled here (no registry), so the base images the Dockerfile names are
# made from this machine's Debian packages and Go toolchain (images.sh) and kept between
# runs as a cache. Modules reach the build through `go mod vendor` into a temporary copy
# of the build context, not the network: the build needs no network access at all, uses
# the module cache this machine already has, and tests the very Dockerfile users run
# (which downloads modules itself when the context has no vendor/).
#
# Everything else it makes (the dtq image, containers, the network, the temporary
# context) carries this run's id and is removed on exit, pass or fail.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
RUN_ID=${DTQ_TEST_RUN:-$(date +%s)-$$}
IMAGE=dtq-test/dtq:$RUN_ID
BASE_CACHE=${DTQ_TEST_CACHE:-/var/cache/dtq-deploy-test}
# shellcheck source=images.sh
source "$here/images.sh"

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	echo "deploy/test: SKIP: no Docker engine answers (docker info failed); container lifecycle tests not run" >&2
	exit 3
fi

ctx=""
made_images=()
cleanup() {
	local rc=$?
	set +e
	log "cleaning up run $RUN_ID"
	docker ps -aq --filter "label=dtq.test.run=$RUN_ID" | xargs -r docker rm -f >/dev/null
	docker network ls -q --filter "label=dtq.test.run=$RUN_ID" | xargs -r docker network rm >/dev/null
	# The dtq image and the build stage's images. A parent goes only after its children,
	# so repeat while a pass removes something.
	local left=("${made_images[@]}") next removed=1
	while ((${#left[@]} > 0 && removed)); do
		next=() removed=0
		for id in "${left[@]}"; do
			if docker rmi -f "$id" >/dev/null 2>&1 || ! docker image inspect "$id" >/dev/null 2>&1; then
				removed=1
			else
				next+=("$id")
			fi
		done
		left=("${next[@]}")
	done
	[[ -n $ctx ]] && rm -rf "$ctx"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$BASE_CACHE"
ensure_go_base
ensure_redis

# The build context: the repository's files (tracked or not, minus what git ignores)
# plus vendor/, in a temporary copy; the working tree is never touched.
ctx=$(mktemp -d /tmp/dtq-build-context.XXXXXX)
(cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$ctx")
(cd "$ctx" && go mod vendor)

log "docker build $IMAGE (Dockerfile unchanged; GOFLAGS=-mod=vendor)"
before=$(docker images -aq --no-trunc | sort -u)
start=$(date +%s%N)
build_ok=0
docker build --build-arg GOFLAGS=-mod=vendor --label "dtq.test.run=$RUN_ID" -t "$IMAGE" "$ctx" >"$ctx.build.log" 2>&1 || build_ok=$?
# Images this build made (only ours: the engine here serves nothing else while we run).
while read -r id; do made_images+=("$id"); done < <(comm -13 <(echo "$before") <(docker images -aq --no-trunc | sort -u))
if ((build_ok != 0)); then
	tail -30 "$ctx.build.log" >&2
	rm -f "$ctx.build.log"
	log "FAIL: docker build"
	exit 1
fi
rm -f "$ctx.build.log"
build_s=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.0f", (b - a) / 1e9 }')
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
log "built in ${build_s}s; image size $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1e6 }') MB)"

log "go test -tags docker ./test (lifecycle)"
cd "$repo/deploy"
set +e
DTQ_TEST_IMAGE=$IMAGE DTQ_TEST_REDIS_IMAGE=$REDIS_TAG DTQ_TEST_RUN=$RUN_ID DTQ_TEST_IMAGE_SIZE=$size \
	go test -tags docker -count=1 -v -timeout 15m ./test
status=$?
set -e
exit "$status"
