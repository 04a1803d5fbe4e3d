# Shell functions the GPU machine's bench scripts share: sourced, never run.

# The host bytes in use now, MemTotal - MemAvailable (tmpfs pages count: they are not
# available), as a whole number: mawk's print writes one past 2^31 as 3e+10, which test's -gt
# refuses.
host_used_bytes() {
    awk '/^MemTotal:/ {t = $2} /^MemAvailable:/ {a = $2} END {printf "%.0f\n", (t - a) * 1024}' /proc/meminfo
}

# track_peak FILE COMMAND...: every second, COMMAND's output (a whole number), the highest so
# far written to FILE; run in the background, and killed when the job it watches ends.
track_peak() {
    local file=$1 peak=0 now
    shift
    while :; do
        now=$("$@")
        [ "${now:-0}" -gt "$peak" ] && peak=$now
        echo "$peak" >"$file"
        sleep 1
    done
}

