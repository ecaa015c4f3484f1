/** A device's tags from a CSV file, in the Configuration view (docs/console.md#tag-lists-in-csv). */
import { useState } from 'preact/hooks';

export function CsvImport(props: { onPreview: (csv: string, format: string) => void }) {
  const [csv, setCsv] = useState('');
  const [format, setFormat] = useState('edgeferry');
  return (
    <div class="card" data-testid="csv-import">
      <h3>Import tags from CSV</h3>
      <p class="small">Replaces the device's tags; every bad row is named, and nothing is applied while one is bad.</p>
      <select value={format} onChange={(e) => setFormat(e.currentTarget.value)} name="csv-format">
        <option value="edgeferry">edgeferry columns</option>
        <option value="kepware">Kepware tag export</option>
      </select>{' '}
      <input
        type="file"
        accept=".csv,text/csv"
        name="csv-file"
        onChange={(e) => {
          const file = e.currentTarget.files?.[0];
          if (file) void file.text().then(setCsv);
        }}
      />
      <textarea name="csv" rows={6} value={csv} onInput={(e) => setCsv(e.currentTarget.value)} class="mono" />
      <button
        type="button"
        disabled={csv === ''}
        onClick={() => props.onPreview(csv, format)}
        data-testid="csv-preview"
      >
        Check and preview
      </button>
    </div>
  );
}
