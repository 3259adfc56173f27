// Test-only: a minimal OpenTelemetry Collector for sigx's tracing e2e tests. It is the real
// collector (otelcol service, the upstream OTLP receiver) with one exporter, the contrib file
// exporter, which writes every batch it receives as OTLP JSON lines to a file the test reads.
// Built by scripts/build-otelcol.sh into .tools/bin/sigx-otelcol; started by e2e/src/otelcol.rs.
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	// The collector's own telemetry (its logs; metrics are turned off by the test's config).
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "sigx-otelcol",
			Description: "test-only OpenTelemetry Collector for sigx (OTLP receiver, file exporter)",
			Version:     "0.161.0",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// A bare --config path is a file.
				DefaultScheme: "file",
				ProviderFactories: []confmap.ProviderFactory{
					fileprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatalf("sigx-otelcol: %v", err)
	}
}
