/* conv1x1_grid: the pointwise kernel's grid split (conv1x1_f32.c grid_split, a static function: this driver
 * includes the source) for geometries read from stdin, one per line "units nb panels tail read_unit parts most"; prints
 * per line the cap found and the parts' first tiles ("cap at0 .. at_parts"), or the cap alone (most + 1) when
 * no cap up to `most` fits. tests/runtime/test_conv1x1.py compares them with codegen/splits.py's grid split, the
 * plain tile-by-tile fill the C's whole-unit steps must equal. */
#include <stdio.h>

#include "conv/conv1x1_f32.c"

int main(void)
{
    long units, panels, tail, read_unit, most;
    int nb, parts;
    while (scanf("%ld %d %ld %ld %ld %d %ld", &units, &nb, &panels, &tail, &read_unit, &parts, &most) == 7) {
        long at[257];
        const long cap = grid_split(units, nb, panels, tail, read_unit, parts, most, at);
        printf("%ld", cap);
        if (cap <= most)
            for (int p = 0; p <= parts; p++) printf(" %ld", at[p]);
        printf("\n");
    }
    return 0;
}
