/* tests/workloads/wl-plugin.c - a tiny shared object for the dlopen workload. */
int wl_plugin_value(int x);
int wl_plugin_value(int x)
{
    return x * 3 + 1;
}
