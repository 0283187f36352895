#!/bin/sh
# Driver upgrade across a GPU pool from any CI (or by hand): capacity gate, campaign with the
# build number as ticket, manual approval after the canary, waves; the build fails on a halt.
#
#   BUILD_NUMBER=123 TARGET_BASELINE=h100-drv570 SELECTOR=pool:training \
#     PLAYBOOK=upgrade-driver.yml ./examples/campaign.sh
#
# Exit codes (docs/reference.md, "Exit codes"): 0 completed, 1 capacity short or campaign
# halted, 2 bad input, 4 unknown baseline/selector, 5 status does not allow it, 6 retry,
# 10 approval refused (this script's own).
set -eu

: "${BUILD_NUMBER:?set BUILD_NUMBER (the CI build, used as the ticket)}"
: "${TARGET_BASELINE:?set TARGET_BASELINE}"
SELECTOR=${SELECTOR:-pool:training}
PLAYBOOK=${PLAYBOOK:-upgrade-driver.yml}
ROLLBACK=${ROLLBACK:-rollback-driver.yml}
GATE_GPUS=${GATE_GPUS:-64}
GPUFLEET=${GPUFLEET:-gpufleet}
TICKET="BUILD-$BUILD_NUMBER"
CAMPAIGN="$TARGET_BASELINE-$BUILD_NUMBER"
export GPUFLEET_ACTOR="${GPUFLEET_ACTOR:-ci:build-$BUILD_NUMBER}"

echo "== capacity gate"
$GPUFLEET capacity check --gpus "$GATE_GPUS" --headroom 10%

echo "== plan $CAMPAIGN ($TICKET)"
$GPUFLEET campaign create "$CAMPAIGN" --target-baseline "$TARGET_BASELINE" \
    --selector "$SELECTOR" --playbook "$PLAYBOOK" --rollback-playbook "$ROLLBACK" \
    --auto-rollback --canary 1 --waves 10%,25%,100% --max-failures 1 \
    --ticket "$TICKET" --require-approval

echo "== canary"
$GPUFLEET campaign run "$CAMPAIGN"   # exit 1 on halt: set -e fails the build

printf 'canary validated; roll out the waves of %s? [y/N] ' "$CAMPAIGN"
read -r answer || answer=
case "$answer" in
    y|Y|yes) ;;
    *) $GPUFLEET campaign abort "$CAMPAIGN"; echo "not approved"; exit 10 ;;
esac
GPUFLEET_ACTOR="${APPROVER:-$(id -un)}" $GPUFLEET campaign approve "$CAMPAIGN"

echo "== waves"
$GPUFLEET campaign resume "$CAMPAIGN"
$GPUFLEET campaign report "$CAMPAIGN"
