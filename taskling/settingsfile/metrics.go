package settingsfile

import "github.com/prometheus/client_golang/prometheus"

// Collector returns the file's reload metrics, labelled by file:
//
//	taskling_settings_file_reloads_total{file}      good reads (the first included)
//	taskling_settings_file_failures_total{file}     refused reads (the last good settings stayed)
//	taskling_settings_file_error{file}              1 while the last read was refused, else 0
//	taskling_settings_file_loaded_seconds{file}     when the settings in force were read (Unix time)
func (s *Source) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Source }

var (
	reloadsDesc  = prometheus.NewDesc("taskling_settings_file_reloads_total", "Good reads of the settings file, the first included.", []string{"file"}, nil)
	failuresDesc = prometheus.NewDesc("taskling_settings_file_failures_total", "Refused reads of the settings file (the last good settings stayed in force).", []string{"file"}, nil)
	errorDesc    = prometheus.NewDesc("taskling_settings_file_error", "1 while the last read of the settings file was refused.", []string{"file"}, nil)
	loadedDesc   = prometheus.NewDesc("taskling_settings_file_loaded_seconds", "When the settings in force were read (Unix time).", []string{"file"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadsDesc
	ch <- failuresDesc
	ch <- errorDesc
	ch <- loadedDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Status()
	inError := 0.0
	if st.Err != nil {
		inError = 1
	}
	ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(st.Reloads), c.s.path)
	ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(st.Failures), c.s.path)
	ch <- prometheus.MustNewConstMetric(errorDesc, prometheus.GaugeValue, inError, c.s.path)
	ch <- prometheus.MustNewConstMetric(loadedDesc, prometheus.GaugeValue, float64(st.LoadedAt.UnixNano())/1e9, c.s.path)
}
