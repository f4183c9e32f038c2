/* template.h: internal API of the Jinja interpreter (the public entry point
 * mtplx_template_render is in mtplx.h). Values are cJSON trees. */
#ifndef MTPLX_TEMPLATE_H
#define MTPLX_TEMPLATE_H

#include "core/core.h"

#include <cjson/cJSON.h>

typedef struct mtplx_template mtplx_template;

/* Parse once, render many times. Errors name the construct and its line. */
mtplx_status mtplx_template_parse(const char *src, mtplx_template **out);
/* vars: a cJSON object (borrowed). *out: caller frees. */
mtplx_status mtplx_template_render_json(const mtplx_template *t, const cJSON *vars, char **out,
                                        size_t *out_len);
void mtplx_template_free(mtplx_template *t);

#endif
