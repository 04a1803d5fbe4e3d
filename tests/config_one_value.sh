#!/usr/bin/env bash
# An override on the command line carries one value, on one line: a value that would read as
# more settings or a comment ('optimizer.lr=1e-3;steps=2', a newline, '# note', "a" "b") is
# refused in one line with exit 2, where it was once shown in the plan and its extra setting
# silently dropped.
# usage: config_one_value.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"

refused() { refused_dry "$@"; } # e2e_lib.sh
ONE='more than one value \(only one value may follow .=.\)$'
refused semicolon "override optimizer.lr=1e-3;steps=2: optimizer.lr: $ONE" 'optimizer.lr=1e-3;steps=2'
refused newline "override optimizer.lr=1e-3.nsteps=2: optimizer.lr: more than one line$" $'optimizer.lr=1e-3\nsteps=2'
refused comment "override steps=3 # note: steps: $ONE" 'steps=3 # note'
refused cpp_comment "override steps=3 //x: steps: $ONE" 'steps=3 //x'
refused group "override steps=3 optimizer = { lr = 1.0 }: steps: $ONE" 'steps=3 optimizer = { lr = 1.0 }'
refused two_strings "override backend=\"cpu\" \"x\": backend: more than one value after the string$" 'backend="cpu" "x"'
refused quoted_then_setting "override backend=\"cpu\"; steps=2: backend: more than one value after the string$" 'backend="cpu"; steps=2'
# One value still passes: a number, a quoted string with a ';' inside, a range.
expect "one value each passes" "$MTRUN" -np 2 "$WORK/base.cfg" --dry-run optimizer.lr=1e-3 \
    'backend="cpu"' 'checkpoint.dir="a;b"' >/dev/null
finish
