#!/usr/bin/env bash
# One branch per locked entry whose ref has moved, each with the upgrade committed and the
# reviewer's report (markdown) beside it for its pull request's body. Run by the scheduled
# workflow in docs/ci/wlock-upgrades.yml, from the project's folder; tested as it is by
# tests/integration/test_upgrade_prs.py.
#
#   WLOCK_UPGRADE_BODIES  where the bodies go (default: .wlock-upgrades/, one file a branch)
#   WLOCK_UPGRADE_PUSH=1  push each branch and open its pull request with `gh` (CI only)
set -euo pipefail

bodies=${WLOCK_UPGRADE_BODIES:-.wlock-upgrades}
base=$(git rev-parse --abbrev-ref HEAD)
mkdir -p "$bodies"

# `wlock outdated` exits 1 when something moved, 0 when nothing did; anything else is a
# failure (the Hub unreachable: 5), which stops the run.
set +e
outdated=$(wlock outdated --json)
code=$?
set -e
if [ "$code" -gt 1 ]; then
  echo "$outdated" >&2
  exit "$code"
fi

python3 -c 'import json, sys
for e in json.loads(sys.argv[1])["entries"]:
    if e["moved"]:
        print(e["kind"], e["id"])' "$outdated" |
while read -r kind id; do
  branch="wlock/upgrade/${id//\//--}"
  body="$bodies/${branch//\//_}.md"
  git checkout -q -B "$branch" "$base"
  wlock -q lock --upgrade-package "$id" --format markdown > "$body"
  git add weights.lock
  git commit -q -m "Upgrade $kind $id to $(wlock revision "$id" | cut -c1-7)" -m "$(cat "$body")"
  if [ "${WLOCK_UPGRADE_PUSH:-}" = 1 ]; then
    git push -q -f origin "$branch"
    gh pr create --head "$branch" --base "$base" --title "Upgrade $id" --body-file "$body" ||
      gh pr edit "$branch" --body-file "$body"
  fi
  echo "$branch: $body"
  git checkout -q "$base"
done
