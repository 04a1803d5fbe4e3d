#!/usr/bin/env bash
# --resume refuses a damaged or mismatched checkpoint: exit 2, one line naming the file and
# what failed (and no Open MPI banner), and the run folder left exactly as it was. An intact one resumes bitwise, also
# with another -np (another split of the checksum blocks over the ranks).
source "$(dirname "$0")/e2e_lib.sh" "$@"
CFG=$SRC/configs/test-small.cfg
# 64 KiB checksum blocks (instead of 64 MiB) give test-small's 1.3 MB state.bin 20 blocks.
export MT_CHECKPOINT_BLOCK_BYTES=65536
run_job full 3 "$CFG" || show_log full
run_job base 3 "$CFG" --stop-at 10 || show_log base
M=step_000010/manifest.json
expect "the manifest lists 20 block checksums" \
    python3 -c "import json,sys; sys.exit(len(json.load(open('$WORK/base/$M'))['checksum']['blocks']) != 20)"
expect "the manifest records model shape, data position and seed" python3 -c "
import json, sys; m = json.load(open('$WORK/base/$M'))
sys.exit(not (m['version'] == 3 and m['model']['dim'] == 64 and m['model']['kv_heads'] == 2
              and m['model']['tied_embeddings'] is True and m['data']['position'] == 10
              and m['data']['seed'] == '1337' and 'rng' in m['data']))"

# Every file's path, size, mtime and bytes: any change to the folder shows.
snap() { (cd "$1" && find . -printf '%p %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort); }

# refused NAME TEXT: resuming $WORK/NAME exits 2 with one mt-rank line containing TEXT and
# changes nothing in the folder.
refused() {
    local before after rc
    before=$(snap "$WORK/$1")
    "$MTRUN" -np 3 "$CFG" --out "$WORK/$1" --resume "$WORK/$1" >"$WORK/$1.log" 2>&1
    rc=$?
    after=$(snap "$WORK/$1")
    # one line from the rank and no Open MPI banner (its lines of dashes) around it
    if [ $rc -eq 2 ] && [ "$(grep -c 'mt-rank:' "$WORK/$1.log")" -eq 1 ] &&
        ! grep -q -- '^-----' "$WORK/$1.log" &&
        grep 'mt-rank:' "$WORK/$1.log" | grep -qF -- "$2" && [ "$before" = "$after" ]; then
        return 0
    fi
    echo "exit $rc"
    show_log "$1"
    return 1
}

# damage NAME PYTHON: a copy of base, with PYTHON run on it (m: the manifest as a dict,
# written back afterwards; st: state.bin opened r+b). The manifest's "self" checksum is then
# recomputed with xxhsum, as a careful forger would, so that the field checks behind it are
# what is tested; forge=0 in PYTHON leaves it stale.
damage() {
    cp -a "$WORK/base" "$WORK/$1"
    (cd "$WORK/$1/step_000010" && python3 -c "
import json, subprocess; m = json.load(open('manifest.json')); st = open('state.bin', 'r+b')
forge = 1
old_self = m.get('self')
$2
if 'self' in m and forge: m['self'] = '0' * 16
json.dump(m, open('manifest.json', 'w'), indent=1)
if 'self' in m and forge:
    h = subprocess.run(['xxhsum', '-H1', 'manifest.json'], capture_output=True, text=True).stdout.split()[0]
    text = open('manifest.json').read().replace('\"self\": \"' + '0' * 16, '\"self\": \"' + h)
    open('manifest.json', 'w').write(text)
elif 'self' in m: # stale: the old checksum over an edited text
    text = open('manifest.json').read()
    open('manifest.json', 'w').write(text.replace('\"self\": \"' + m['self'], '\"self\": \"' + old_self))")
}

damage flip "st.seek(7 * 65536 + 100); b = st.read(1)[0]; st.seek(-1, 1); st.write(bytes([b ^ 1]))"
expect "one flipped bit in state.bin block 7 is refused, naming state.bin and the block" \
    refused flip "step_000010/state.bin: block 7 (bytes 458752-524287) checksum mismatch"
damage last "st.seek(-1, 2); b = st.read(1)[0]; st.seek(-1, 2); st.write(bytes([b ^ 128]))"
expect "a flipped bit in the last (short) block is refused" refused last "state.bin: block 19 "
damage short "st.truncate(1000000)"
expect "a truncated state.bin is refused" refused short "state.bin: truncated or oversized"
damage sum "m['checksum']['blocks'][3] = '0123456789abcdef'"
expect "a wrong checksum in the manifest is refused" refused sum "state.bin: block 3 "

damage dim "m['model']['dim'] = 128"
expect "another model.dim is refused" refused dim "step_000010/manifest.json: model.dim 128 != config 64"
damage tied "m['model']['tied_embeddings'] = False"
expect "another tied_embeddings is refused" refused tied "manifest.json: model.tied_embeddings false != config true"
damage nokv "del m['model']['kv_heads']"
expect "a missing model.kv_heads is refused" refused nokv "manifest.json: model.kv_heads missing"
damage nomodel "del m['model']"
expect "a missing model object is refused" refused nomodel "manifest.json: no \"model\" object"
damage nosum "del m['checksum']"
expect "a missing checksum object is refused" refused nosum "manifest.json: no \"checksum\" object"
damage fewer "m['checksum']['blocks'].pop()"
expect "a short checksum list is refused" refused fewer "manifest.json: checksum.blocks should list 20"
damage v1 "m['version'] = 1"
expect "manifest version 1 is refused" refused v1 "manifest.json: version 1, this build reads versions 2 and 3"
# Issue 14, item 3: the manifest is not trusted.
damage bit "forge = 0; m['step'] = 11"
expect "step 10 -> 11 without a new self checksum is refused" \
    refused bit "manifest.json: its \"self\" checksum does not match its contents"
damage step0 "m['step'] = 0; m['data']['position'] = 0"
expect "a forged step 0 (self checksum recomputed) is refused by state.bin's header" \
    refused step0 "state.bin: holds step 10 (0 skipped, seed 1337), the manifest says step 0"
damage seed "m['data']['seed'] = '42'"
expect "another seed is refused" refused seed "manifest.json: data.seed 42 != the config's seed 1337"
damage groups "m['groups'] = 5"
expect "another group count is refused" refused groups "manifest.json: groups 5 != 4"
damage noself "del m['self']"
expect "a version 3 manifest without its self checksum is refused" refused noself "no \"self\" checksum"
damage nostep "del m['step']"
expect "a missing step is refused" refused nostep "manifest.json: step missing"
damage json "pass"
echo '{"step": 10,' >"$WORK/json/$M"
expect "a manifest that is not JSON is refused" refused json "manifest.json: not valid JSON"

"$MTRUN" -np 4 "$CFG" --out "$WORK/base" --resume "$WORK/base" >"$WORK/resume.log" 2>&1 ||
    show_log resume
expect "the intact checkpoint resumes with -np 4, bitwise" diff <(losses "$WORK/full") <(losses "$WORK/base")
finish
