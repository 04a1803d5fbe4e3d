// The hostfile is checked before mpirun sees it: a typo then gets one line naming the
// file and the line, not a page of Open MPI help text after the job half started.
#include "launcher/launcher.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

// A positive count after "slots=" or "max_slots=", or -1.
static long count_of(const char *s) {
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || errno || v < 1 || v > 1000000) ? -1 : v;
}

static int host_name_ok(const char *h) {
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(".-_:[]", *p)) return 0;
    return 1;
}

// One line without its comment: 1 with *slots (0 when not given) for a host, 0 for a blank
// line, -1 when it is not "host [slots=N] [max_slots=N]".
static int parse_line(char *line, long *slots) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok) return 0;
    if (strchr(tok, '=') || !host_name_ok(tok)) return -1;
    *slots = 0;
    int seen_slots = 0, seen_max = 0;
    while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
        if (strncmp(tok, "slots=", 6) == 0 && !seen_slots) {
            if ((*slots = count_of(tok + 6)) < 0) return -1;
            seen_slots = 1;
        } else if ((strncmp(tok, "max_slots=", 10) == 0 || strncmp(tok, "max-slots=", 10) == 0) &&
                   !seen_max) {
            if (count_of(tok + 10) < 0) return -1;
            seen_max = 1;
        } else {
            return -1;
        }
    }
    return 1;
}

// The line as the user wrote it, for the message: no comment, no outer blanks.
static const char *trimmed(char *s) {
    char *hash = strchr(s, '#');
    if (hash) *hash = 0;
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    if (n > 60) strcpy(s + 57, "...");
    return s;
}

int hostfile_check(const char *path, int default_slots, int *hosts, long *slots, char *err,
                   size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], copy[1024];
    int lineno = 0, rc = 0;
    *hosts = 0;
    *slots = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        memcpy(copy, line, sizeof line);
        long n = 0;
        int kind = parse_line(line, &n);
        if (kind < 0) {
            snprintf(err, errlen, "%s:%d: expected 'host [slots=N]', got '%s'", path, lineno,
                     trimmed(copy));
            rc = -1;
            break;
        }
        if (kind == 1) {
            (*hosts)++;
            *slots += n ? n : default_slots;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && *hosts == 0) {
        snprintf(err, errlen, "%s: no hosts in it (one 'host [slots=N]' per line)", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}
