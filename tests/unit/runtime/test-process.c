/* Unit tests for the process's names (child/core/process.c): the command line taken from
 * the loader's argv is what /proc/self/cmdline shows for the same arguments: each argument
 * joined by a space, argv[0]'s base name the program's name, cut at the buffer's end. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "child/core/core.h"
#include "testlib.h"

static void test_the_loader_argv_gives_the_same_names_as_proc(void **state)
{
    char from_proc[4096];

    (void)state;
    rt_process_read_command_line(); /* this test program's own, from /proc/self/cmdline */
    (void)snprintf(from_proc, sizeof(from_proc), "%s", rt_product());
    {
        char *argv[] = {"/usr/bin/prog", "--flag", "", "last arg", NULL};

        assert_int_equal(rt_process_set_command_line(4, argv), 0);
        /* An empty argument is kept, as /proc shows it: two spaces. */
        assert_string_equal(rt_product(), "/usr/bin/prog --flag  last arg");
        assert_string_equal(rt_program_name(), "prog");
    }
    {
        char *argv[] = {"plain", NULL};

        assert_int_equal(rt_process_set_command_line(1, argv), 0);
        assert_string_equal(rt_product(), "plain");
        assert_string_equal(rt_program_name(), "plain");
    }
    assert_string_not_equal(from_proc, "");
    assert_non_null(strstr(from_proc, "test-runtime-process"));
}

static void test_a_long_command_line_is_cut_not_overrun(void **state)
{
    static char big[10000];
    char *argv[] = {"/bin/long", big, "after", NULL};

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    assert_int_equal(rt_process_set_command_line(3, argv), 0);
    assert_int_equal(strlen(rt_product()), 4095);
    assert_true(strncmp(rt_product(), "/bin/long xxx", 13) == 0);
    assert_string_equal(rt_program_name(), "long");
}

static void test_no_argv_is_refused(void **state)
{
    char *empty[] = {NULL};

    (void)state;
    assert_int_equal(rt_process_set_command_line(0, empty), -EINVAL);
    assert_int_equal(rt_process_set_command_line(1, NULL), -EINVAL);
    assert_int_equal(rt_process_set_command_line(1, empty), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_the_loader_argv_gives_the_same_names_as_proc),
            cmocka_unit_test(test_a_long_command_line_is_cut_not_overrun),
            cmocka_unit_test(test_no_argv_is_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
