/* rt_json: typed getters (present, default, missing, null, wrong type) and the line and
 * column of a syntax error. */
#include <stdio.h>
#include <string.h>

#include "runtime/base/rt_json.h"
#include "tests/testutil.h"

#define EXPECT_MSG(sub) \
    TZ_EXPECT(strstr(rt_error_message(), (sub)) != NULL, "message '%s' lacks '%s'", rt_error_message(), (sub))

int main(void) {
    const char *dir = tz_tmpdir();
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    tz_write_text(path,
                  "{\n  \"n_embd\": 64,\n  \"n_layer\": 2.0,\n  \"eps\": 1e-5,\n  \"act\": \"gelu_new\",\n"
                  "  \"tie\": true,\n  \"n_inner\": null,\n  \"half\": 2.5,\n  \"big\": 1e12,\n  \"name\": 7\n}\n");
    cJSON *cfg = NULL;
    TZ_EXPECT_OK(rt_json_load(path, &cfg));
    TZ_EXPECT(cfg != NULL, "parsed");

    int i = 0;
    TZ_EXPECT_OK(rt_json_get_int(cfg, "config.json", "n_embd", &i, true, 0));
    TZ_EXPECT(i == 64, "n_embd=%d", i);
    TZ_EXPECT_OK(rt_json_get_int(cfg, "config.json", "n_layer", &i, true, 0));
    TZ_EXPECT(i == 2, "2.0 reads as 2, got %d", i);
    TZ_EXPECT_OK(rt_json_get_int(cfg, "config.json", "n_inner", &i, false, 256));
    TZ_EXPECT(i == 256, "null gives the default, got %d", i);
    TZ_EXPECT_OK(rt_json_get_int(cfg, "config.json", "n_head", &i, false, 12));
    TZ_EXPECT(i == 12, "missing gives the default, got %d", i);

    TZ_EXPECT(rt_json_get_int(cfg, "config.json", "n_head", &i, true, 0) == RT_ERR_CONFIG, "missing required");
    TZ_EXPECT(strcmp(rt_error_message(), "config.json: field 'n_head' is missing (expected an integer)") == 0,
              "got '%s'", rt_error_message());
    TZ_EXPECT(rt_json_get_int(cfg, "config.json", "n_inner", &i, true, 0) == RT_ERR_CONFIG, "null required");
    EXPECT_MSG("field 'n_inner' is null");
    TZ_EXPECT(rt_json_get_int(cfg, "config.json", "half", &i, true, 0) == RT_ERR_CONFIG, "2.5 is not an int");
    EXPECT_MSG("'half' is the number 2.5");
    TZ_EXPECT(rt_json_get_int(cfg, "config.json", "big", &i, true, 0) == RT_ERR_CONFIG, "1e12 overflows int");
    TZ_EXPECT(rt_json_get_int(cfg, "config.json", "act", &i, false, 0) == RT_ERR_CONFIG, "string for int");
    TZ_EXPECT(strcmp(rt_error_message(), "config.json: field 'act' is a string (expected an integer)") == 0, "got '%s'",
              rt_error_message());

    double d = 0;
    TZ_EXPECT_OK(rt_json_get_double(cfg, "config.json", "eps", &d, true, 0));
    TZ_EXPECT(d == 1e-5, "eps=%g", d);
    TZ_EXPECT_OK(rt_json_get_double(cfg, "config.json", "n_embd", &d, true, 0));
    TZ_EXPECT(d == 64.0, "int reads as double");
    TZ_EXPECT_OK(rt_json_get_double(cfg, "config.json", "dropout", &d, false, 0.1));
    TZ_EXPECT(d == 0.1, "default double");
    TZ_EXPECT(rt_json_get_double(cfg, "config.json", "tie", &d, true, 0) == RT_ERR_CONFIG, "bool for double");
    EXPECT_MSG("'tie' is a boolean (expected a number)");

    const char *s = NULL;
    TZ_EXPECT_OK(rt_json_get_string(cfg, "config.json", "act", &s, true, NULL));
    TZ_EXPECT(s && strcmp(s, "gelu_new") == 0, "act");
    TZ_EXPECT_OK(rt_json_get_string(cfg, "config.json", "model_type", &s, false, "gpt2"));
    TZ_EXPECT(s && strcmp(s, "gpt2") == 0, "default string");
    TZ_EXPECT(rt_json_get_string(cfg, "config.json", "name", &s, true, NULL) == RT_ERR_CONFIG, "number for string");
    EXPECT_MSG("'name' is the number 7 (expected a string)");

    bool b = false;
    TZ_EXPECT_OK(rt_json_get_bool(cfg, "config.json", "tie", &b, true, false));
    TZ_EXPECT(b, "tie");
    TZ_EXPECT_OK(rt_json_get_bool(cfg, "config.json", "scale", &b, false, true));
    TZ_EXPECT(b, "default bool");
    TZ_EXPECT(rt_json_get_bool(cfg, "config.json", "n_embd", &b, true, false) == RT_ERR_CONFIG, "number for bool");
    TZ_EXPECT(rt_json_get_bool(cfg, "config.json", "missing", &b, true, false) == RT_ERR_CONFIG, "missing bool");
    EXPECT_MSG("field 'missing' is missing (expected true or false)");

    /* getters on something that is not an object */
    cJSON *arr = cJSON_CreateArray();
    TZ_EXPECT(rt_json_get_int(arr, "x.json", "k", &i, false, 0) == RT_ERR_CONFIG, "array is not an object");
    cJSON_Delete(arr);
    cJSON_Delete(cfg);

    /* syntax error on line 3: the message names file, line and column */
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    tz_write_text(bad, "{\n  \"a\": 1,\n  \"b\": ,\n  \"c\": 3\n}\n");
    cJSON *j = NULL;
    TZ_EXPECT(rt_json_load(bad, &j) == RT_ERR_FORMAT, "bad json");
    TZ_EXPECT(j == NULL, "no tree on error");
    char want[600];
    snprintf(want, sizeof want, "%s:3:", bad);
    EXPECT_MSG(want);
    EXPECT_MSG("invalid JSON");

    tz_write_text(bad, "{\"a\": [1, 2,");
    TZ_EXPECT(rt_json_load(bad, &j) == RT_ERR_FORMAT, "unterminated");
    EXPECT_MSG("bad.json:1:");

    tz_write_text(bad, "{\"a\": 1} trailing");
    TZ_EXPECT(rt_json_load(bad, &j) == RT_ERR_FORMAT, "trailing text");
    EXPECT_MSG(":1:10:");

    tz_write_text(bad, "");
    TZ_EXPECT(rt_json_load(bad, &j) == RT_ERR_FORMAT, "empty file");

    snprintf(bad, sizeof bad, "%s/nope.json", dir);
    TZ_EXPECT(rt_json_load(bad, &j) == RT_ERR_IO, "missing file");
    EXPECT_MSG("nope.json: cannot open");
    TZ_EXPECT(rt_json_load(dir, &j) == RT_ERR_IO, "directory");

    /* parse from memory, no NUL needed */
    const char text[] = "[1, 2]xxxx";
    TZ_EXPECT_OK(rt_json_parse(text, 6, "mem", &j));
    TZ_EXPECT(cJSON_GetArraySize(j) == 2, "array of 2");
    cJSON_Delete(j);
    return tz_test_result("test_json");
}
