#!/usr/bin/env bash
# model.dense_layers is a list of layer indices, comma-separated, digits only, each once: a
# trailing comma, a space and a repeated layer ("0,", " 1", "1,1,1") are refused in one line
# with exit 2, naming the key, rather than read loosely.
# usage: config_dense_layers.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
MOE=(model.experts=4 model.top_k=2 model.moe_ffn_dim=32)

# refused NAME REGEX LIST: model.dense_layers = LIST on the MoE model is refused (e2e_lib.sh).
refused() { refused_dry "$1" "$2" "${MOE[@]}" "model.dense_layers=\"$3\""; }
LIST='must list layer indices below model.layers = 2, comma-separated, digits only$'
refused trailing_comma "model.dense_layers: \"0,\" $LIST" "0,"
refused leading_space "model.dense_layers: \" 1\" $LIST" " 1"
refused repeated "model.dense_layers: \"1,1,1\" lists layer 1 twice$" "1,1,1"
refused empty_entry "model.dense_layers: \"0,,1\" $LIST" "0,,1"
refused plus "model.dense_layers: \"\\+1\" $LIST" "+1"
refused out_of_range "model.dense_layers: \"2\" $LIST" "2"
for good in "0" "1,0" "0,1"; do
    expect "\"$good\" passes" "$MTRUN" -np 2 "$WORK/base.cfg" --dry-run "${MOE[@]}" \
        "model.dense_layers=\"$good\"" >/dev/null
done
finish
