#!/usr/bin/env bash
# DeepSeek's router fields: the correction bias, the groups and the scale go with router_score
# "sigmoid"; the groups must hold 2 experts each (a group's score is its top 2), top_k fit in the
# groups kept, router_softmax stay "all", and router_aux stay off (transformers adds no
# load-balancing loss for this router). Each refused in one line with exit 2, naming the key;
# DeepSeek-V3's and GLM-4.5's shapes pass.
# usage: config_router.sh MTRUN REPO_ROOT
source "$(dirname "$0")/e2e_lib.sh" "$1" "$2"
small_config cpu "$WORK/base.cfg"
MOE=(model.experts=8 model.top_k=2 model.moe_ffn_dim=32)
SIG=("${MOE[@]}" 'model.router_score="sigmoid"')
refused_dry correction_softmax 'model.router_correction: goes with model.router_score = "sigmoid"' \
    "${MOE[@]}" model.router_correction=true
refused_dry scale_softmax 'model.router_scale: goes with model.router_score = "sigmoid"' \
    "${MOE[@]}" model.router_scale=2.5
refused_dry groups_softmax 'model.router_groups: goes with model.router_score = "sigmoid"' \
    "${MOE[@]}" model.router_groups=2 model.router_topk_groups=1
refused_dry groups_of_one 'model.router_groups: 8 groups of model.experts = 8: each group needs 2' \
    "${SIG[@]}" model.router_groups=8 model.router_topk_groups=2
refused_dry top_k_past_groups 'model.top_k: 3 is more than the 2 experts of the model.router_topk_groups kept' \
    "${SIG[@]}" model.router_groups=4 model.router_topk_groups=1 model.top_k=3
refused_dry top_k_softmax 'model.router_softmax: must be "all" with model.router_score = "sigmoid"' \
    "${SIG[@]}" 'model.router_softmax="top_k"'
refused_dry aux 'model.router_aux: transformers adds no load-balancing loss' \
    "${SIG[@]}" model.router_aux=true
refused_dry no_experts 'model.router_score: needs model.experts > 0' 'model.router_score="sigmoid"'
expect "DeepSeek-V3's router passes" "$MTRUN" -np 2 "$WORK/base.cfg" --dry-run "${SIG[@]}" \
    model.router_correction=true model.router_groups=4 model.router_topk_groups=2 \
    model.router_scale=2.5 model.shared_ffn_dim=64 model.shared_gate=false \
    'model.moe_names="deepseek"' >/dev/null
expect "GLM-4.5's router (one group) passes" "$MTRUN" -np 2 "$WORK/base.cfg" --dry-run \
    "${SIG[@]}" model.router_correction=true model.router_groups=1 model.router_topk_groups=1 \
    model.router_scale=1.8 >/dev/null
finish
