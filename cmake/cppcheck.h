/* cppcheck.h: macros cppcheck cannot see through (make lint includes this). */
#define cJSON_ArrayForEach(e, a) for (e = (a) ? (a)->child : 0; e; e = e->next)
