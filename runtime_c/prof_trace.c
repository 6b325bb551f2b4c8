/* Chrome trace JSON from a kernel timeline, for the standalone executables (<net>_bench, <net>_train
 * with --profile FILE or MXCC_PROFILER_AUTOSTART=1): the same event shape mxcc.profiler writes (X events
 * named after the layer, one thread per phase), readable by Perfetto UI, chrome://tracing and speedscope.
 * The file is written to FILE.tmp and renamed, so a reader never sees a partial trace. */
#include <stdio.h>
#include <stdlib.h>

#include "mxcc_runtime.h"
#include "driver/mxcc_driver.h"   /* mxcc_json_string */

void mxcc_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int mxcc_prof_write_trace(const char *timeline_path, const char *json_path, const char *net,
                          const char *const *names, int n_names)
{
    static const char *const phases[] = {"forward", "backward", "update"};
    FILE *in = fopen(timeline_path, "rb");
    if (!in)
        return -1;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", json_path) >= (int)sizeof tmp) {
        fclose(in);
        return -1;
    }
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return -1;
    }
    fprintf(out, "{\"traceEvents\": [\n");
    fprintf(out, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": ");
    mxcc_json_string(out, net);
    fprintf(out, "}}");
    for (int p = 0; p < 3; p++)
        fprintf(out, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                p + 1, phases[p]);
    mxcc_prof_event ev;
    uint64_t base = 0;
    int first = 1;
    while (fread(&ev, sizeof ev, 1, in) == 1) {
        if (ev.kernel < 0 || ev.kernel >= n_names || ev.phase < 0 || ev.phase > 2 || ev.t1_ns < ev.t0_ns)
            continue;                                   /* a torn record at the end of a killed run */
        if (first) {
            base = ev.t0_ns;
            first = 0;
        }
        fprintf(out, ",\n{\"ph\": \"X\", \"name\": ");
        mxcc_json_string(out, names[ev.kernel]);
        fprintf(out, ", \"cat\": \"%s\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 1, \"tid\": %d, "
                     "\"args\": {\"kernel\": %d, \"phase\": \"%s\"}}",
                phases[ev.phase], (ev.t0_ns - base) / 1e3, (ev.t1_ns - ev.t0_ns) / 1e3, ev.phase + 1,
                ev.kernel, phases[ev.phase]);
    }
    fprintf(out, "\n], \"displayTimeUnit\": \"ns\", \"otherData\": {\"writer\": \"mxcc standalone\"}}\n");
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, json_path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}
